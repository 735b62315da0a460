"""One table and one plot for a sweep: every point's overrides, status and final metrics, and its learning curves.

    python -m launch.report --sweep=configs/sweeps/attention_variants.py [--root=runs]

Prints the table as markdown and writes `<root>/<sweep>/report.md`, `report.csv` and `curves.png` (train and
eval loss against step per point, read from each point's TensorBoard event files). A point still running shows
its latest logged step and losses.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys

from etils import epath

from launch import events, runs
from launch import sweep as sweep_lib

METRICS = ("step", "train_loss", "eval_loss", "eval_accuracy", "eval_perplexity", "bleu", "tokens_per_second",
           "step_temp_mib")
FORMATS = {"train_loss": "{:.4f}", "eval_loss": "{:.4f}", "eval_accuracy": "{:.3f}", "eval_perplexity": "{:.2f}",
           "bleu": "{:.2f}", "tokens_per_second": "{:,.0f}", "step_temp_mib": "{:,.1f}", "step": "{:d}"}
CURVES = (("train/loss", "train loss"), ("eval/loss", "eval loss"))


def collect(sweep: sweep_lib.Sweep, root: str) -> tuple[list[dict], dict[str, dict]]:
  """(rows, curves): one row per point (point, swept keys, status, METRICS) and `{point: {tag: [(step, v)]}}`."""
  rows, curves = [], {}
  for point in sweep.points:
    workdir = sweep.workdir(root, point)
    curves[point.name] = events.scalars(epath.Path(workdir) / "tensorboard")
    values = sweep.swept_values(point)
    row = {"point": point.name, **{key: values.get(key, "") for key in sweep.keys},
           "status": runs.status(workdir, point.steps)}
    results = runs.read_results(workdir)
    if results is None:  # Not finished: the latest logged values.
      results = {metric: curves[point.name][tag][-1][1] for tag, metric in
                 (("train/loss", "train_loss"), ("eval/loss", "eval_loss"), ("eval/accuracy", "eval_accuracy"),
                  ("eval/perplexity", "eval_perplexity"))
                 if curves[point.name].get(tag)}
      if curves[point.name].get("train/loss"):
        results["step"] = curves[point.name]["train/loss"][-1][0]
    row.update({metric: results.get(metric) for metric in METRICS})
    rows.append(row)
  return rows, curves


def markdown(rows: list[dict]) -> str:
  """The rows as a markdown table (numbers rounded, missing values empty)."""
  columns = list(rows[0])

  def cell(column, value):
    if value is None or value == "":
      return ""
    if column in FORMATS and _is_number(value):
      return FORMATS[column].format(int(value) if column == "step" else value)
    return sweep_lib.cli_value(value)

  lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
  lines += ["| " + " | ".join(cell(c, row[c]) for c in columns) + " |" for row in rows]
  return "\n".join(lines) + "\n"


def write_csv(rows: list[dict], path: epath.PathLike):
  text = io.StringIO(newline="")
  writer = csv.DictWriter(text, fieldnames=list(rows[0]))
  writer.writeheader()
  for row in rows:
    writer.writerow({k: "" if v is None else v if _is_number(v) else sweep_lib.cli_value(v) for k, v in row.items()})
  epath.Path(path).write_bytes(text.getvalue().encode("utf-8"))


def _is_number(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool)


def plot(curves: dict[str, dict], path: epath.PathLike, title: str):
  """Train and eval loss against step, one line per point, as a PNG."""
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  figure, axes = plt.subplots(1, len(CURVES), figsize=(13, 4.8))
  for ax, (tag, label) in zip(axes, CURVES):
    drawn = False
    for name, scalars in curves.items():
      if scalars.get(tag):
        steps, values = zip(*scalars[tag])
        ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=name)
        drawn = True
    ax.set(title=label, xlabel="step", ylabel="loss")
    ax.grid(alpha=0.3)
    if drawn:
      ax.legend(fontsize="small")
    else:
      ax.text(0.5, 0.5, "no data yet", ha="center", va="center", transform=ax.transAxes)
  figure.suptitle(title)
  figure.tight_layout()
  with epath.Path(path).open("wb") as f:
    figure.savefig(f, format="png", dpi=100)
  plt.close(figure)


def write(sweep: sweep_lib.Sweep, root: str) -> tuple[str, dict[str, str]]:
  """Writes report.md, report.csv and curves.png into `<root>/<sweep>/` (local or gs://...); returns (markdown
  table, paths)."""
  rows, curves = collect(sweep, root)
  folder = epath.Path(root) / sweep.name
  folder.mkdir(parents=True, exist_ok=True)
  paths = {name: os.fspath(folder / name) for name in ("report.md", "report.csv", "curves.png")}
  table = markdown(rows)
  write_csv(rows, paths["report.csv"])
  plot(curves, paths["curves.png"], f"sweep {sweep.name} ({sweep.base})")
  epath.Path(paths["report.md"]).write_text(
      f"# Sweep `{sweep.name}` on `{sweep.base}`\n\n{table}\n![learning curves](curves.png)\n")
  return table, paths


def main(argv: list[str] | None = None) -> int:
  """`python -m launch.report` (also `jformer sweep-report`): prints the table, writes the files."""
  parser = argparse.ArgumentParser(prog="python -m launch.report", description=__doc__.split("\n")[0])
  parser.add_argument("--sweep", required=True, help="sweep file, e.g. configs/sweeps/attention_variants.py")
  parser.add_argument("--root", default="runs", help="folder holding <sweep>/<point>/ workdirs (local or gs://...)")
  args = parser.parse_args(argv)
  try:
    sweep = sweep_lib.load(args.sweep)
  except sweep_lib.SweepError as e:
    print(f"launch.report: error: {e}", file=sys.stderr)
    return 1
  table, paths = write(sweep, args.root)
  print(table, end="")
  print(f"\nwrote {', '.join(paths.values())}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
