"""README command 1, recorded: `jformer train --config=configs/demo.py` on the bundled corpus, as a subprocess, with
the machine it ran on, its wall time and the run's results.json (test BLEU, planned steps, step time, losses).

    python benchmarks/demo.py [--workdir=runs/demo_benchmark] [--json=benchmarks/results/demo.json] [-- OVERRIDES]

The workdir must not hold a run (a finished one would only be read back); extra arguments after `--` go to
`jformer train` unchanged (e.g. `--config.train.budget_minutes=5`). The time budget makes the number of steps
depend on the machine's speed, so the BLEU does too: the record names the machine and the share of CPU time other
processes used during the run (`busy_share_other`, from /proc/stat).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

import common


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  extra = argv[argv.index("--") + 1:] if "--" in argv else []
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", default="runs/demo_benchmark")
  parser.add_argument("--config", default="configs/demo.py")
  parser.add_argument("--json", default="benchmarks/results/demo.json")
  args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
  workdir = pathlib.Path(args.workdir)
  if (workdir / "config.json").exists():
    parser.error(f"{workdir} already holds a run; name a new --workdir")
  machine = common.announce([sys.argv[0], *argv])
  command = [sys.executable, "-m", "jformer.main", "train", f"--config={args.config}", f"--workdir={workdir}", *extra]
  meter, start = common.CpuMeter(), time.perf_counter()
  meter.start()
  process = subprocess.run(command, cwd=common.REPO, check=False)
  wall, busy_other = time.perf_counter() - start, meter.stop()
  if process.returncode != 0:
    print(f"jformer train exited with status {process.returncode}", file=sys.stderr)
    return process.returncode
  results = json.loads((workdir / "results.json").read_text())
  record = {"benchmark": "demo", "machine": machine, "config": args.config, "overrides": extra,
            "wall_seconds": round(wall, 1), "busy_share_other": None if busy_other is None else round(busy_other, 3),
            "results": results}
  summary = {k: results.get(k) for k in ("bleu", "step", "planned_steps", "budget_step_seconds", "eval_loss")}
  print(json.dumps(summary))
  common.write_json(args.json, record)
  return 0


if __name__ == "__main__":
  sys.exit(main())
