"""The LM demo against nanoGPT at equal wall clock: on each text folder, `jformer train --config=configs/lm_demo.py`
(its 10-minute budget, vocabulary and dropout chosen by its rules) and then `benchmarks/nanogpt_baseline.py` for the
same minutes (nanoGPT's model and shakespeare_char recipe, byte-level, lm_demo's width, depth, heads, rows and
context), one after the other in one command, each as a subprocess.

    .venv/bin/pip install -e '.[bench]'   # torch, for the baseline (or --torch_python=a Python that has it)
    python benchmarks/lm_baseline.py --data=jformer/data/corpora/english_text,DIR2 --root=runs/lm_baseline \
        --json=benchmarks/results/lm_baseline.json --figure=docs/results/lm_baseline.png

Recorded per folder: the text's size, both runs' valid and test bits per byte and steps, and their valid curves
(jformer's every `train.eval_every` steps from its TensorBoard scalars, nanoGPT's on its fixed valid windows), with
`late_rise`: how much jformer's valid bits per byte rose over the last quarter of its steps (the worst point after
the first evaluation of that quarter against the best before it; <= 0: no rise). Both score the same valid and test
text (jformer's bits per byte divide by its documents' bytes, nanoGPT's by the files'; they differ by the blank
lines between documents, a few bytes in 10^5). The machine line and the share of CPU time other processes took
during each run (`busy_share_other`) come with them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import common

BASELINE = pathlib.Path(__file__).with_name("nanogpt_baseline.py")
BPB_TAG = "eval/bits_per_byte"


def late_rise(curve: list[tuple[int, float]], last_step: int) -> float | None:
  """How much the valid bits per byte rose in the last quarter of `last_step` steps: the highest value at or after
  the first evaluation in that quarter, less the lowest one before it (None with fewer than 2 such points)."""
  start = 0.75 * last_step
  before = [value for step, value in curve if step < start]
  after = [value for step, value in curve if step >= start]
  if not before or not after:
    return None
  return max(after) - min(before)


def run(command: list[str], log: pathlib.Path) -> tuple[float, float | None]:
  """Runs `command` in the repository with its output in `log` (and on the screen); (wall seconds, other share)."""
  print("$", " ".join(command), flush=True)
  meter, start = common.CpuMeter(), time.perf_counter()
  meter.start()
  with log.open("w") as out:
    process = subprocess.Popen(command, cwd=common.REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in process.stdout:
      sys.stdout.write(line)
      out.write(line)
  if process.wait():
    raise SystemExit(f"{command[0]} exited with status {process.returncode}; its output is in {log}")
  return time.perf_counter() - start, meter.stop()


def jformer_run(folder: str, workdir: pathlib.Path, minutes: float) -> dict:
  """configs/lm_demo.py on `folder` for `minutes`: its results, recipe line and valid curve."""
  from launch import events

  if (workdir / "config.json").exists():
    raise SystemExit(f"{workdir} already holds a run; name a new --root")
  workdir.mkdir(parents=True, exist_ok=True)
  log = workdir.parent / f"{workdir.name}.log"
  wall, other = run([sys.executable, "-m", "jformer.main", "train", "--config=configs/lm_demo.py",
                     f"--workdir={workdir}", f"--config.data.path={folder}",
                     f"--config.train.budget_minutes={minutes}"], log)
  results = json.loads((workdir / "results.json").read_text())
  curve = [(int(step), float(value)) for step, value in events.scalars(workdir / "tensorboard").get(BPB_TAG, [])]
  recipe_line = next((line.strip() for line in log.read_text().splitlines() if line.startswith("recipe:")), "")
  config = json.loads((workdir / "config.json").read_text())
  return {"valid_bpb": results["eval_bits_per_byte"], "test_bpb": results["test_bits_per_byte"],
          "steps": results["step"], "train_seconds": round(results["train_seconds"], 1),
          "parameters": results.get("parameters"), "xz_bpb": results.get("xz_bits_per_byte"),
          "vocab_size": config["model"]["vocab_size"], "dropout_rate": config["model"]["dropout_rate"],
          "recipe": recipe_line, "curve": curve, "late_rise": late_rise(curve, results["step"]),
          **{key: results.get(key) for key in ("tested_step", "tested_metric", "tested_why")},
          "wall_seconds": round(wall, 1), "busy_share_other": None if other is None else round(other, 3)}


def nanogpt_run(folder: str, out: pathlib.Path, minutes: float, python: str) -> dict:
  """benchmarks/nanogpt_baseline.py on `folder` for `minutes` (its defaults: lm_demo's shape): its results."""
  record = out.parent / f"{out.name}.json"
  wall, other = run([python, str(BASELINE), f"--data={folder}", f"--minutes={minutes}", f"--json={record}"],
                    out.parent / f"{out.name}.log")
  results = json.loads(record.read_text())["results"]
  curve = [(int(point["step"]), float(point["valid_bpb"])) for point in results["curve"]]
  return {"valid_bpb": results["valid_bpb"], "test_bpb": results["test_bpb"], "steps": results["steps"],
          "train_seconds": round(results["train_seconds"], 1), "parameters": results["parameters"], "curve": curve,
          "late_rise": late_rise(curve, results["steps"]), "wall_seconds": round(wall, 1),
          "busy_share_other": None if other is None else round(other, 3)}


def plot(corpora: list[dict], path: str) -> None:
  """Valid bits per byte against training minutes (a run's steps spread evenly over its training seconds), one
  panel per text, jformer and nanoGPT in each."""
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  figure, axes = plt.subplots(1, len(corpora), figsize=(6.5 * len(corpora), 4.5), squeeze=False)
  for ax, corpus in zip(axes[0], corpora):
    for model, label in (("jformer", "jformer lm_demo"), ("nanogpt", "nanoGPT byte-level")):
      run = corpus[model]
      minutes = [step / run["steps"] * run["train_seconds"] / 60 for step, _ in run["curve"]]
      ax.plot(minutes, [value for _, value in run["curve"]], marker=".", label=label)
    ax.set(title=f"{corpus['name']} ({corpus['bytes'] / 1e6:.2f} MB)", xlabel="training minutes",
           ylabel="valid bits per byte")
    ax.set_ylim(top=min(4.0, ax.get_ylim()[1]))
    ax.grid(alpha=0.3)
    ax.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=100)
  plt.close(figure)


def text_size(folder: str) -> dict:
  """The train split's documents, words and bytes (`jformer.data.corpus_size.measure`)."""
  from jformer.data.corpus_size import measure

  size = measure("text", folder)
  return {"documents": size.examples, "words": size.words, "bytes": size.bytes}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--data", required=True, help="comma-separated text folders ({train,valid,test}.txt[.gz])")
  parser.add_argument("--minutes", type=float, default=10.0, help="each run's training budget (lm_demo: 10)")
  parser.add_argument("--root", default="runs/lm_baseline", help="where the runs and their logs go (must be new)")
  parser.add_argument("--torch_python", default=sys.executable, help="the Python that runs the baseline (has torch)")
  parser.add_argument("--json", default="benchmarks/results/lm_baseline.json")
  parser.add_argument("--figure", default="docs/results/lm_baseline.png", help="the curves' PNG ('' = none)")
  args = parser.parse_args(argv)
  machine = common.announce(sys.argv if argv is None else [sys.argv[0], *argv])
  root = pathlib.Path(args.root)
  corpora = []
  for folder in args.data.split(","):
    name = pathlib.Path(folder).name
    corpora.append({"name": name, "path": os.path.relpath(folder, common.REPO) if not folder.startswith("/") else
                    folder, **text_size(folder),
                    "jformer": jformer_run(folder, root / name / "jformer", args.minutes),
                    "nanogpt": nanogpt_run(folder, root / name / "nanogpt", args.minutes, args.torch_python)})
    print(json.dumps({k: corpora[-1][k]["valid_bpb"] for k in ("jformer", "nanogpt")}), flush=True)
  if args.figure:
    plot(corpora, args.figure)
  common.write_json(args.json, {"benchmark": "lm_baseline", "machine": machine, "minutes": args.minutes,
                                "corpora": corpora, "figure": os.path.basename(args.figure) if args.figure else ""})
  return 0


if __name__ == "__main__":
  sys.exit(main())
