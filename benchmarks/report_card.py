"""`jformer report-card`, recorded: the command run as a subprocess (its output shown as it comes), then its card,
the baseline card it was printed beside, its progress lines, its wall time and how busy the machine was, into
benchmarks/results/report_card_<variant>.json (docs/results/report_card.md), and its plot into docs/results/.

    python benchmarks/report_card.py [--workdir=runs/report_card_benchmark] -- \
        --config.imports=tests/plugins/learned_temperature.py --config.model.attention=learned_temperature

Arguments after `--` go to `jformer report-card` unchanged. The workdir (one folder per variant inside) must not
hold the variant's card yet: its finished runs would only be read back.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import time

import common

PROGRESS = "report card "  # the card's own progress lines (the training runs print theirs between them)


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  extra = argv[argv.index("--") + 1:] if "--" in argv else []
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--workdir", default="runs/report_card_benchmark")
  parser.add_argument("--json", default="", help="default: benchmarks/results/report_card_<variant>.json")
  args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
  from jformer import report_card

  overrides = dict(item.removeprefix("--config.").split("=", 1) for item in extra if item.startswith("--config."))
  name = report_card.variant_name(overrides)
  workdir = pathlib.Path(args.workdir) / name
  if (workdir / "report_card.json").exists():
    parser.error(f"{workdir} already holds a card; name a new --workdir")
  machine = common.announce([sys.argv[0], *argv])
  baseline = report_card.cached_row(report_card.variant_name(report_card.BASELINE))
  command = [sys.executable, "-m", "jformer.main", "report-card", f"--workdir={workdir}", *extra]
  meter, start = common.CpuMeter(), time.perf_counter()
  meter.start()
  process = subprocess.Popen(command, cwd=common.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  output = []
  for line in process.stdout:
    print(line, end="", flush=True)
    output.append(line.rstrip("\n"))
  returncode = process.wait()  # reaped first: its CPU time is then this run's own (common.CpuMeter)
  wall, busy_other = time.perf_counter() - start, meter.stop()
  if returncode != 0:
    print(f"jformer report-card exited with status {returncode}", file=sys.stderr)
    return returncode
  figure = pathlib.Path("docs/results") / f"report_card_{name}.png"
  shutil.copyfile(workdir / "report_card.png", common.REPO / figure)
  markdown = (workdir / "report_card.md").read_text()
  record = {"benchmark": "report_card", "machine": machine, "overrides": extra, "wall_seconds": round(wall, 1),
            "busy_share_other": None if busy_other is None else round(busy_other, 3),
            "card": json.loads((workdir / "report_card.json").read_text()),
            "baseline": baseline, "table": markdown.split("\n\n")[1], "figure": figure.name,
            "progress": [line for line in output if line.startswith(PROGRESS)]}
  common.write_json(args.json or f"benchmarks/results/report_card_{name}.json", record)
  return 0


if __name__ == "__main__":
  sys.exit(main())
