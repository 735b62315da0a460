"""One table and one plot for a sweep: every point's overrides, status and final metrics, and its learning curves.

    python -m launch.report --sweep=configs/sweeps/attention_variants.py [--root=runs]

Prints the table as markdown and writes `<root>/<sweep>/report.md`, `report.csv` and `curves.png` (train and
eval loss against step per point, read from each point's TensorBoard event files). A point still running shows
its latest logged step and eval metrics. The table has a column for each of METRICS that some point has; a
metric whose value is a dict (`"test_bits_per_byte_at": {"256": x, "512": y}`) has one column per entry
(`test_bits_per_byte@256`, ...), and language-model sweeps, whose points hold one, also get `extrapolation.png`:
that metric against context length, one line per point.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys

from etils import epath

from launch import best_of, events, runs
from launch import sweep as sweep_lib

# results.json keys shown, in this order (translation: bleu; language modelling: bits per byte, test at each
# context of train.eval_lengths, valid, and the xz -9 baseline on valid).
METRICS = ("step", "train_loss", "eval_loss", "averaged_eval_loss", "tested_params", "eval_accuracy",
           "tested_step", "tested_value", "eval_perplexity", "bleu", "test_accuracy",
           "test_exact_match", "test_bits_per_byte_at", "eval_bits_per_byte", "xz_bits_per_byte", "tokens_per_second",
           "step_temp_mib", "train_seconds")
FORMATS = {"tested_step": "{:d}", "tested_value": "{:.4g}",
           "train_loss": "{:.4f}", "eval_loss": "{:.4f}", "averaged_eval_loss": "{:.4f}", "eval_accuracy": "{:.3f}", "eval_perplexity": "{:.2f}",
           "bleu": "{:.2f}", "test_bits_per_byte": "{:.3f}", "eval_bits_per_byte": "{:.3f}",
           "xz_bits_per_byte": "{:.3f}", "tokens_per_second": "{:,.0f}", "step_temp_mib": "{:,.1f}", "step": "{:d}",
           "test_accuracy": "{:.3f}", "test_exact_match": "{:.3f}", "train_seconds": "{:.0f}"}
CURVES = (("train/loss", "train loss"), ("eval/loss", "eval loss"))
# The dict-valued metric plotted against its entries (context lengths) in extrapolation.png.
EXTRAPOLATION = "test_bits_per_byte_at"


def collect(sweep: sweep_lib.Sweep, root: str) -> tuple[list[dict], dict[str, dict]]:
  """(rows, curves): one row per point (point, swept keys, status, metric columns) and `{point: {tag: [(step,
  v)]}}`. The metric columns are `metric_columns` of all points' results; a point lacking one has None."""
  heads, point_results, curves = [], [], {}
  for point in sweep.points:
    workdir = sweep.workdir(root, point)
    curves[point.name] = events.scalars(epath.Path(workdir) / "tensorboard")
    values = sweep.swept_values(point)
    heads.append({"point": point.name, **{key: values.get(key, "") for key in sweep.keys},
                  "status": runs.status(workdir, point.steps)})
    results = runs.read_results(workdir)
    if results is None:  # Not finished: the latest logged train/ and eval/ scalars (eval/loss -> eval_loss).
      results = {tag.replace("/", "_"): scalars[-1][1] for tag, scalars in curves[point.name].items()
                 if tag.split("/")[0] in ("train", "eval") and scalars}
      if curves[point.name].get("train/loss"):
        results["step"] = curves[point.name]["train/loss"][-1][0]
    point_results.append(flatten(results))
  columns = metric_columns(point_results)
  rows = [{**head, **{column: results.get(column) for column in columns}}
          for head, results in zip(heads, point_results)]
  return rows, curves


def flatten(results: dict) -> dict:
  """`results` with every dict-valued metric `name_at = {entry: v}` (or `name = {...}`) replaced by `name@entry`
  keys: `{"test_bits_per_byte_at": {"256": 1.9}}` -> `{"test_bits_per_byte@256": 1.9}`."""
  flat = {}
  for metric, value in results.items():
    if isinstance(value, dict):
      flat.update({f"{_stem(metric)}@{entry}": v for entry, v in value.items()})
    else:
      flat[metric] = value
  return flat


def metric_columns(flat_results: list[dict]) -> list[str]:
  """The METRICS that some point has (flattened), in METRICS order; the entries of a dict-valued one in numeric
  order (`@256`, `@512`, `@1024`)."""
  columns = []
  for metric in METRICS:
    stem = _stem(metric)
    entries = {key[len(stem) + 1:] for results in flat_results for key in results if key.startswith(stem + "@")}
    columns += [f"{stem}@{entry}" for entry in sorted(entries, key=_entry_order)]
    if any(results.get(metric) is not None for results in flat_results):
      columns.append(metric)
  return columns


def _stem(metric: str) -> str:
  return metric.removesuffix("_at")


def _entry_order(entry: str):
  return (0, int(entry), "") if entry.isdigit() else (1, 0, entry)


def markdown(rows: list[dict]) -> str:
  """The rows as a markdown table (numbers rounded, missing values empty)."""
  columns = list(rows[0])

  def cell(column, value):
    if value is None or value == "":
      return ""
    metric = column.split("@")[0]  # `test_bits_per_byte@256` is formatted as `test_bits_per_byte`.
    if metric in FORMATS and _is_number(value):
      return FORMATS[metric].format(int(value) if column == "step" else value)
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


def plot_extrapolation(rows: list[dict], path: epath.PathLike, title: str):
  """EXTRAPOLATION (bits per byte) against context length, one line per point that has it, as a PNG."""
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  prefix = _stem(EXTRAPOLATION) + "@"
  figure, ax = plt.subplots(figsize=(8, 5))
  lengths = set()
  for row in rows:
    points = sorted((int(column[len(prefix):]), value) for column, value in row.items()
                    if column.startswith(prefix) and _is_number(value))
    if points:
      ax.plot(*zip(*points), marker="o", label=row["point"])
      lengths.update(length for length, _ in points)
  ax.set_xscale("log", base=2)
  ax.set_xticks(sorted(lengths), [str(length) for length in sorted(lengths)])
  ax.set(title=title, xlabel="context length (tokens)", ylabel=_stem(EXTRAPOLATION).replace("_", " "))
  ax.grid(alpha=0.3)
  ax.legend(fontsize="small")
  figure.tight_layout()
  with epath.Path(path).open("wb") as f:
    figure.savefig(f, format="png", dpi=100)
  plt.close(figure)


def write(sweep: sweep_lib.Sweep, root: str) -> tuple[str, dict[str, str]]:
  """Writes report.md, report.csv and curves.png (extrapolation.png when some point has EXTRAPOLATION; the best-of
  table and best.png when the sweep file defines FIGURE, `best_of`) into `<root>/<sweep>/` (local or gs://...);
  returns (markdown table, paths)."""
  rows, curves = collect(sweep, root)
  folder = epath.Path(root) / sweep.name
  folder.mkdir(parents=True, exist_ok=True)
  extrapolates = any(column.startswith(_stem(EXTRAPOLATION) + "@") for column in rows[0])
  names = (("report.md", "report.csv", "curves.png") + (("extrapolation.png",) if extrapolates else ())
           + (("best.png",) if sweep.figure else ()))
  paths = {name: os.fspath(folder / name) for name in names}
  table = markdown(rows)
  write_csv(rows, paths["report.csv"])
  plot(curves, paths["curves.png"], f"sweep {sweep.name} ({sweep.base})")
  figures = "![learning curves](curves.png)\n"
  if extrapolates:
    plot_extrapolation(rows, paths["extrapolation.png"], f"sweep {sweep.name}: length extrapolation")
    figures += "\n![bits per byte against context length](extrapolation.png)\n"
  if sweep.figure:
    groups = best_of.best_points(sweep, rows)
    best_of.plot(groups, sweep.figure, paths["best.png"], f"sweep {sweep.name}: best {sweep.figure['metric']}")
    figures += (f"\n## Best {sweep.figure['metric']} per group (best over {sweep.figure['best_over']})\n\n"
                f"{best_of.markdown(groups, sweep.figure)}\n![best per group](best.png)\n")
  epath.Path(paths["report.md"]).write_text(f"# Sweep `{sweep.name}` on `{sweep.base}`\n\n{table}\n{figures}")
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
