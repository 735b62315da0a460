"""What the test run's XLA flags (tests/xla_flags.py) buy and cost, on the tests' own tiny model.

The tests' model (tests/helpers.py `tiny`: a 2+2-layer encoder-decoder, d_model 32, vocabulary 50) under three flag
sets, each in a fresh process (XLA reads XLA_FLAGS once, at its first compile), one after the other: XLA's
defaults, `-O0` (the LLVM back end's optimization level), and `-O0` with XLA:CPU's classic fusion emitters (the
test run's flags). Per set: `eager s`, a forward pass run op by op as most tests run the model (JAX compiles
each op for its shape: in a fresh process that is nearly all of it); `init s`, the jitted initialisation of the
train state, compiled and run; `step compile s`, the jitted train step's lowering and compilation; `step ms`, one
step afterwards (median of the timing rules' repetitions). The first-step loss of every set must agree.

    python benchmarks/compile_flags.py [--reps=5] [--json=compile_flags.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import common

sys.path.insert(0, str(common.REPO / "tests"))
import xla_flags  # noqa: E402

FLAG_SETS = {
    "XLA defaults": "",
    "-O0": "--xla_backend_optimization_level=0",
    "-O0, classic emitters (tests)": xla_flags.COMPILE_FAST,
}


def measure(reps: int) -> dict:
  """This process's row (its XLA_FLAGS already set): eager forward, jitted init, train step compile and run."""
  common.setup()
  import jax
  import numpy as np

  from helpers import init, tiny, tokens
  from jformer import config as config_lib
  from jformer.train import optim, state as state_lib, step as step_lib

  model = tiny()
  start = time.perf_counter()
  params = init(model, tokens(0, (2, 6)), tokens(1, (2, 5)))
  jax.block_until_ready(model.apply(params, tokens(0, (2, 6)), tokens(1, (2, 5))))
  eager_s = time.perf_counter() - start
  tx, schedule = optim.build_optimizer(config_lib.base_config().optimizer, 32)
  rng = np.random.default_rng(0)
  batch = {k: jax.numpy.asarray(rng.integers(1, 50, (8, 32), dtype=np.int32)) for k in ("inputs", "targets")}
  start = time.perf_counter()
  state = jax.block_until_ready(
      jax.jit(lambda key: state_lib.init_train_state(model, tx, key, batch))(jax.random.PRNGKey(0)))
  init_s = time.perf_counter() - start
  start = time.perf_counter()
  step = jax.jit(step_lib.make_train_step(model, tx, schedule, label_smoothing=0.1)).lower(state, batch).compile()
  compile_s = time.perf_counter() - start
  first_loss, timing = common.time_train_steps(step, state, batch, reps)
  return {"eager_s": round(eager_s, 2), "init_s": round(init_s, 2), "step_compile_s": round(compile_s, 2),
          "step_ms": timing.summary(1e3, 2), "first_loss": round(first_loss, 5)}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # a child: one row, as JSON.
  common.add_common_arguments(parser, default_json="compile_flags.json")
  args = parser.parse_args(argv)
  common.check_reps(parser, args)
  if args.measure:
    print(json.dumps(measure(args.reps)))
    return
  machine = common.announce()
  rows = []
  for name, flags in FLAG_SETS.items():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()}
    child = subprocess.run([sys.executable, __file__, "--measure", f"--reps={args.reps}"], env=env, check=True,
                           capture_output=True, text=True)
    rows.append({"flags": name, "xla_flags": flags, **json.loads(child.stdout.strip().splitlines()[-1])})
    print(f"{name}: {rows[-1]}", flush=True)
  print(common.markdown_table(
      ["flags", "eager s", "init s", "step compile s", "step ms median (min-max)", "first-step loss"],
      [[r["flags"], r["eager_s"], r["init_s"], r["step_compile_s"],
        f"{r['step_ms']['median']} ({r['step_ms']['min']}-{r['step_ms']['max']})", r["first_loss"]] for r in rows]))
  common.write_json(args.json, {"benchmark": "compile_flags", "machine": machine, "model": "tests/helpers.py tiny",
                                "rows": rows})


if __name__ == "__main__":
  main()
