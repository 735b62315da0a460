"""The persistent compilation cache (jformer/runtime.py), measured: the compile seconds of a sweep point whose
programs an earlier point compiled, and of a resume, with the cache and without it.

    python benchmarks/compile_cache.py [--config=configs/small.py] [--steps=2] [--json=PATH] [--config.KEY=VALUE ...]

Per mode (cache off: JFORMER_COMPILATION_CACHE=''; on: a fresh folder), three `jformer train` processes, each
fresh: point A (train.seed=0, `--steps` steps), point B (train.seed=1, its own workdir: a seed sweep's second
point, the same programs), and A resumed for `--steps` more steps; all of them evaluate and decode BLEU on 8
sentences at their last step, and share one prepared dataset (`data.data_dir`). Compile seconds are the sum of JAX's
'/jax/core/compile/backend_compile_duration' events in the process (XLA compiling a program, or loading it from
the cache); wall seconds the whole process. A sweep over values that are constants of the step (a learning rate)
changes the train step's program: its point compiles that step again and loads the rest (eval, decode).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import common

# Runs `jformer train ARGS` in this process with JAX's compile events counted; prints one RESULT line.
RUN = """
import json, sys
from jax import monitoring
seconds, hits = [0.0], [0]
def duration(event, duration_secs, **kwargs):
  if event == "/jax/core/compile/backend_compile_duration":
    seconds[0] += duration_secs
def count(event, **kwargs):
  if event == "/jax/compilation_cache/cache_hits":
    hits[0] += 1
monitoring.register_event_duration_secs_listener(duration)
monitoring.register_event_listener(count)
from jformer import main
main.main(sys.argv[1:])
print("RESULT " + json.dumps({"compile_s": seconds[0], "cache_hits": hits[0]}))
"""


def run_train(config: str, workdir: str, steps: int, seed: int, cache: str, overrides: list[str]) -> dict:
  env = {**os.environ, "JFORMER_COMPILATION_CACHE": cache}
  command = [sys.executable, "-c", RUN, "train", f"--config={config}", f"--workdir={workdir}",
             f"--config.train.steps={steps}", f"--config.train.seed={seed}", f"--config.train.eval_every={steps}",
             f"--config.train.checkpoint_every={steps}", "--config.train.bleu_examples=8", *overrides]
  start = time.perf_counter()
  done = subprocess.run(command, cwd=common.REPO, env=env, capture_output=True, text=True, check=False)
  wall = time.perf_counter() - start
  if done.returncode:
    sys.exit(f"jformer train failed ({done.returncode}):\n{done.stderr[-3000:]}")
  result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
  return {**result, "wall_s": wall}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--config", default="configs/small.py")
  parser.add_argument("--steps", type=int, default=2)
  parser.add_argument("--json", default="", help="also write the rows as JSON here")
  args, overrides = parser.parse_known_args(argv)
  if any(not o.startswith("--config.") for o in overrides):
    parser.error(f"unknown arguments {overrides} (config overrides look like --config.model.d_model=128)")
  rows = []
  with tempfile.TemporaryDirectory() as scratch:
    for mode in ("off", "on"):
      cache = os.path.join(scratch, "xla") if mode == "on" else ""
      runs = (("point A (first)", "a", args.steps, 0), ("point B (seed 1)", "b", args.steps, 1),
              ("resume of A", "a", 2 * args.steps, 0))
      for label, workdir, steps, seed in runs:
        result = run_train(args.config, os.path.join(scratch, mode, workdir), steps, seed, cache,
                           [f"--config.data.data_dir={os.path.join(scratch, 'tfds')}", *overrides])
        rows.append({"cache": mode, "run": label, **result})
        print(f"cache {mode:<3} {label:<18} compile {result['compile_s']:6.1f} s  hits {result['cache_hits']:3d}  "
              f"process {result['wall_s']:6.1f} s", flush=True)
  print(common.markdown_table(["cache", "run", "compile s", "cache hits", "process s"],
                              [[r["cache"], r["run"], f"{r['compile_s']:.1f}", r["cache_hits"], f"{r['wall_s']:.1f}"]
                               for r in rows]))
  if args.json:
    common.write_json(args.json, {"benchmark": "compile_cache", "machine": common.machine(), "config": args.config,
                                  "steps": args.steps, "overrides": overrides, "rows": rows})
  return 0


if __name__ == "__main__":
  sys.exit(main())
