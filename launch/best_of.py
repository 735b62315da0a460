"""The best point of each group of a sweep, and its figure: what a sweep file's FIGURE asks the report for.

    FIGURE = {"metric": "test_accuracy",                 # results.json key, higher is better
              "x": "model.d_model",                      # swept key on the x axis (log2)
              "panels": ("data.dataset_options.seq_len", "data.dataset_options.num_kv_pairs"),  # one panel each
              "best_over": "optimizer.learning_rate_scale"}  # swept key whose best value each group keeps

A group is one (row, panel, x): the row is the sweep file's `row_of(overrides)` (e.g. the attention variant),
else the point's swept values less x, panels and best_over. Each group keeps its point with the highest metric
(Zoology's rule: the best learning rate per point); a group none of whose points has the metric yet is left
out. `python -m launch.report` writes the table into report.md and the figure as best.png: the metric against x,
one line per row, one panel per panel value.
"""

from __future__ import annotations

import os

from etils import epath

KEYS = ("metric", "x", "panels", "best_over")


def check(figure: dict) -> None:
  """Raises ValueError unless `figure` has exactly KEYS."""
  if set(figure) != set(KEYS):
    raise ValueError(f"FIGURE needs the keys {list(KEYS)}, got {sorted(figure)} (see launch/best_of.py)")


def best_points(sweep, rows: list[dict]) -> list[dict]:
  """One dict per group (module doc), in the sweep's order: row, panel (tuple), x, the metric's best value, the
  best_over value that gave it, that point's train seconds and name. `rows`: `report.collect`'s, one per point."""
  figure = sweep.figure
  check(figure)
  grouping = {figure["x"], figure["best_over"], *figure["panels"]}
  best: dict[tuple, dict] = {}
  for point, row in zip(sweep.points, rows, strict=True):
    values = sweep.swept_values(point)
    name = (sweep.row_of(point.overrides) if sweep.row_of else
            ",".join(f"{k}={v}" for k, v in values.items() if k not in grouping) or "base")
    key = (name, tuple(values.get(k) for k in figure["panels"]), values.get(figure["x"]))
    value = row.get(figure["metric"])
    if value is None:
      best.setdefault(key, None)
      continue
    if best.get(key) is None or value > best[key]["value"]:
      best[key] = {"row": name, "panel": key[1], "x": key[2], "value": value,
                   "best_over": values.get(figure["best_over"]), "seconds": row.get("train_seconds"),
                   "point": point.name}
  return [group for group in best.values() if group is not None]


def markdown(groups: list[dict], figure: dict) -> str:
  """The groups as a markdown table: row, panel, x, the best metric, the best_over value, train seconds."""
  panel = ", ".join(k.split(".")[-1] for k in figure["panels"])
  lines = [f"| row | {panel} | {figure['x'].split('.')[-1]} | best {figure['metric']} | "
           f"{figure['best_over'].split('.')[-1]} | train s |", "|---|---|---:|---:|---:|---:|"]
  for g in groups:
    seconds = "-" if g["seconds"] is None else f"{g['seconds']:.0f}"
    lines.append(f"| {g['row']} | {', '.join(map(str, g['panel']))} | {g['x']} | {g['value']:.3f} | "
                 f"{g['best_over']} | {seconds} |")
  return "\n".join(lines) + "\n"


def plot(groups: list[dict], figure: dict, path: os.PathLike | str, title: str) -> None:
  """The best metric against x, one line per row, one panel per panel value, as a PNG."""
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  panels = list(dict.fromkeys(g["panel"] for g in groups))
  names = list(dict.fromkeys(g["row"] for g in groups))
  xs = sorted({g["x"] for g in groups})
  canvas, axes = plt.subplots(1, max(len(panels), 1), figsize=(4.5 * max(len(panels), 1), 4.2), squeeze=False,
                              sharey=True)
  for ax, panel in zip(axes[0], panels):
    for name in names:
      line = sorted((g["x"], g["value"]) for g in groups if g["panel"] == panel and g["row"] == name)
      if line:
        ax.plot(*zip(*line), marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set(title=", ".join(f"{k.split('.')[-1]} {v}" for k, v in zip(figure["panels"], panel)),
           xlabel=figure["x"].split(".")[-1], ylabel=f"best {figure['metric']}")
    ax.grid(alpha=0.3)
  handles = {label: handle for ax in axes[0] for handle, label in zip(*ax.get_legend_handles_labels())}
  axes[0][0].legend(handles.values(), handles.keys(), fontsize="small")  # every row, whichever panel has it
  canvas.suptitle(title)
  canvas.tight_layout()
  with epath.Path(path).open("wb") as f:
    canvas.savefig(f, format="png", dpi=100)
  plt.close(canvas)
