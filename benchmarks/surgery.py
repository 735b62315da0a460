"""Attention surgery on the LM demo: does attention transfer plus a short fine-tune beat training the variant from
scratch (the LoLCATs finding, Zhang et al. 2025), on our own data?

    nice -n 19 python benchmarks/surgery.py --root=runs/surgery \\
        --json=benchmarks/results/surgery.json --figure=docs/results/surgery.png

1. The teacher: the LM demo (configs/lm_demo.py: d_model 256, 4 layers, softmax attention) trained for
   `--teacher_steps` steps (vocabulary 8000 and dropout 0 fixed, so every run below shares them).
2. Each row converts it (`model.layer_kinds` / `model.layer_pattern`, `train.initialize_from` = the teacher): the
   first `--transfer_steps` steps train only the new attention's own parameters to reproduce the teacher's layer
   outputs (`train.attention_transfer`), then `--finetune_steps` steps fine-tune everything on the language-model
   loss; a variant without parameters of its own has nothing to transfer and fine-tunes for all those steps, so
   every conversion trains the same steps.
3. The same architecture trained from scratch with the LM demo's recipe for `--scratch_steps` steps (default: the
   teacher's steps plus the conversion's, the same total steps).
Valid bits per byte of each: the teacher's, after transfer (the evaluation at that step), after fine-tuning, from
scratch. Runs compare at equal steps, not minutes (the machine is shared); a transfer step costs more than a
plain one (the teacher's attention runs beside the new one). Each run is a `jformer train` workdir under --root;
rerunning skips finished runs, and the JSON is rewritten after each one (the conversions run first, then the
longer runs from scratch).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import common  # noqa: E402

DEMO = common.REPO / "configs" / "lm_demo.py"
FIXED = {"train.budget_minutes": 0, "model.vocab_size": 8000, "model.dropout_rate": 0.0}
HEDGEHOG = {"linear": {"attention": "hedgehog"}, "global": {"attention": "auto"}}
LOCAL = {"local": {"attention": "local", "attention_options": {"window_size": 64}}, "global": {"attention": "auto"}}
# name -> (model.layer_kinds, model.layer_pattern, what it is). The demo has 4 layers: 3:1 patterns (Mistral's and
# Gemma's 5:1 needs 6).
ROWS = {
    "hedgehog_3_1": (HEDGEHOG, ("linear", "linear", "linear", "global"), "3:1 hedgehog : softmax"),
    "hedgehog": (HEDGEHOG, ("linear",), "all 4 layers linear attention with learned feature maps (hedgehog)"),
    "local_3_1": (LOCAL, ("local", "local", "local", "global"), "3:1 local (window 64) : global softmax"),
    "linear": ({"linear": {"attention": "linear"}}, ("linear",), "all 4 layers linear attention, elu + 1 "
               "(no parameters of its own: no transfer)"),
}
# The conversion's optimizer: a short warm-up to a peak of 1e-3 (0.05 x 256^-0.5 x 10^-0.5; the teacher peaked at
# 4.4e-3 and cooled down to 0), then eq. 3's decay: a fine-tune, not a second pretraining.
CONVERSION = {"optimizer.warmup_steps": 10, "optimizer.learning_rate_scale": 0.05}


def overrides(values: dict) -> list[str]:
  args = []
  for key, value in values.items():
    if isinstance(value, dict):
      args += overrides({f"{key}.{k}": v for k, v in value.items()})
    else:
      args.append(f"--config.{key}={value!r}" if isinstance(value, tuple) else f"--config.{key}={value}")
  return args


def train(workdir: pathlib.Path, values: dict, config=DEMO) -> tuple[dict, str]:
  """Runs (or resumes, or finds finished) `jformer train` in `workdir`; returns (its results.json, its log)."""
  workdir.parent.mkdir(parents=True, exist_ok=True)
  log = workdir.parent / f"{workdir.name}.log"
  command = [sys.executable, "-m", "jformer.main", "train", f"--config={config}", f"--workdir={workdir}",
             *overrides(values)]
  print("$ " + " ".join(command), flush=True)
  with open(log, "a") as out:
    subprocess.run(command, check=True, stdout=out, stderr=subprocess.STDOUT, cwd=common.REPO)
  return json.loads((workdir / "results.json").read_text()), log.read_text()


def eval_at(log: str, step: int) -> float | None:
  """The valid bits per byte the run's log printed at `step`."""
  found = re.findall(rf"eval step {step}: .*?bits per byte ([0-9.]+)", log)
  return float(found[-1]) if found else None


def curve(log: str) -> list[tuple[int, float]]:
  return [(int(s), float(b)) for s, b in re.findall(r"eval step (\d+): .*?bits per byte ([0-9.]+)", log)]


def plot(data: dict, path: str) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(7, 4))
  teacher = data["teacher"]
  ax.plot(*zip(*teacher["curve"]), color="black", marker="o", label="teacher (softmax)")
  for i, row in enumerate(data["rows"]):
    color = f"C{i}"
    if row.get("converted_curve"):
      steps = [teacher["steps"] + s for s, _ in row["converted_curve"]]
      ax.plot(steps, [b for _, b in row["converted_curve"]], color=color, marker="o",
              label=f"{row['name']}: converted")
    if row.get("scratch_curve"):
      ax.plot(*zip(*row["scratch_curve"]), color=color, linestyle="--", marker="s",
              label=f"{row['name']}: from scratch")
  ax.set_xlabel("training steps (a conversion's counted after the teacher's)")
  ax.set_ylabel("valid bits per byte")
  ax.set_ylim(top=min(ax.get_ylim()[1], 4.0))
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  print(f"wrote {path}")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--root", default="runs/surgery", help="folder of the runs' workdirs")
  parser.add_argument("--teacher_steps", type=int, default=900, help="the teacher's steps (the LM demo's usual length)")
  parser.add_argument("--transfer_steps", type=int, default=30)
  parser.add_argument("--finetune_steps", type=int, default=60)
  parser.add_argument("--scratch_steps", type=int, default=0, help="0 = teacher + transfer + fine-tuning steps")
  parser.add_argument("--rows", nargs="*", default=list(ROWS), help=f"of {list(ROWS)}, in order")
  parser.add_argument("--no_scratch", action="store_true", help="skip the from-scratch runs")
  parser.add_argument("--extra", nargs="*", default=[], help="KEY=VALUE config overrides for every run (tests)")
  parser.add_argument("--json", default="benchmarks/results/surgery.json")
  parser.add_argument("--figure", default="docs/results/surgery.png")
  args = parser.parse_args(argv)
  machine = common.announce(sys.argv if argv is None else [sys.argv[0], *argv])
  root = pathlib.Path(args.root).resolve()
  extra = dict(item.split("=", 1) for item in args.extra)
  converted_steps = args.transfer_steps + args.finetune_steps
  scratch_steps = args.scratch_steps or args.teacher_steps + converted_steps
  results, log = train(root / "teacher", {**FIXED, "train.steps": args.teacher_steps, **extra})
  data = {"benchmark": "surgery", "machine": machine, "teacher_steps": args.teacher_steps,
          "transfer_steps": args.transfer_steps, "finetune_steps": args.finetune_steps,
          "scratch_steps": scratch_steps, "figure": args.figure, "conversion_optimizer": CONVERSION,
          "teacher": {"steps": results["step"], "valid_bpb": results["eval_bits_per_byte"],
                      "test_bpb": results["test_bits_per_byte"], "curve": curve(log)}, "rows": []}
  vocab, = (root / "teacher" / "vocab").glob("spm_*.model")  # every run reads the teacher's vocabulary.
  for name in args.rows:  # the conversions first, then the (longer) runs from scratch: a stopped run records most.
    kinds, pattern, about = ROWS[name]
    learns = any(kind.get("attention") == "hedgehog" for kind in kinds.values())
    transfer = args.transfer_steps if learns else 0
    converted, log = train(root / name / "converted", {
        **FIXED, **CONVERSION, "model.layer_kinds": kinds, "model.layer_pattern": pattern, **extra,
        "train.initialize_from": root / "teacher", "data.vocab_path": vocab, "train.attention_transfer": transfer,
        "train.steps": converted_steps, "train.eval_every": args.transfer_steps})
    data["rows"].append({
        "name": name, "about": about, "transfer_steps": transfer,
        "after_transfer_bpb": eval_at(log, transfer) if transfer else None,
        "converted_bpb": converted["eval_bits_per_byte"], "converted_test_bpb": converted["test_bits_per_byte"],
        "converted_steps": converted["step"], "converted_curve": curve(log)})
    record(data, args)
  for row in data["rows"] if not args.no_scratch else []:
    kinds, pattern, _ = ROWS[row["name"]]
    scratch, log = train(root / row["name"] / "scratch", {
        **FIXED, "model.layer_kinds": kinds, "model.layer_pattern": pattern, **extra, "data.vocab_path": vocab,
        "train.steps": scratch_steps})
    row.update(scratch_bpb=scratch["eval_bits_per_byte"], scratch_test_bpb=scratch["test_bits_per_byte"],
               scratch_steps=scratch["step"], scratch_curve=curve(log))
    record(data, args)
    print(json.dumps({k: v for k, v in row.items() if not k.endswith("curve")}), flush=True)
  return 0


def record(data: dict, args) -> None:
  """The JSON and the plot of what has finished so far."""
  common.write_json(args.json, data)
  if args.figure:
    plot(data, args.figure)


if __name__ == "__main__":
  sys.exit(main())
