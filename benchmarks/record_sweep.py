"""Records a finished sweep with seeds as a `docs/results/` table and figure: one row per group of points that differ
only in their seeds (swept keys ending in `.seed`), the seeds' mean beside each seed's value and their spread. A
sweep file with FIGURE (launch/best_of.py, e.g. configs/sweeps/mqar.py) is recorded as its best-of table instead:
one row per sweep row, one cell per (panel, x), finished points only. A translation sweep (its points score test
BLEU) is recorded one row per point: its swept values, test BLEU, valid and train loss, steps and tokens/s, and its
learning curves (`launch.report`'s figure; the JSON keeps each point's train and valid loss by step).

    python benchmarks/record_sweep.py --sweep=configs/sweeps/lm_blocks.py --root=runs \
        --json=benchmarks/results/sweep_lm_blocks.json --figure=docs/results/lm_blocks.png

A row is named by the sweep file's `row_of(overrides)` where it defines one, else by its point name less the seeds.
Columns: valid bits per byte (mean, each seed, max - min), test bits per byte at each context of
`test_bits_per_byte_at` (mean), the steps trained (a time budget plans them per point), tokens/s and the compiled
train step's temporary memory (means), and with `--decode_cache_at=N` the decode cache of one row of N positions of
the row's model (computed from its shapes, `jax.eval_shape`: nothing runs; for language models). The
figure: each seed's valid bits per byte per row, and test bits per byte against context (the seeds' mean). The
JSON's `title`, `setup` and `findings` (what the table shows, written after reading it) come from `--title`,
`--setup` and `--findings` (a JSON file: a list of {"text", "rows", "seeds"}, each finding naming the table rows it
rests on and their seeds; docs/results/findings.py checks them), or are kept from the JSON already there.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics

import common

PREFIX = "test_bits_per_byte@"


def is_seed(key: str) -> bool:
  return key == "seed" or key.endswith(".seed")


def groups(sweep, rows: list[dict], row_of, root: str, finished_only: bool = False) -> dict[str, list[dict]]:
  """{row name: the report rows of its points (one per seed), each with its `workdir`}, in the sweep's order;
  every point finished, or with `finished_only` the finished ones (a row none of whose points finished is left
  out)."""
  grouped: dict[str, list[dict]] = {}
  from launch import runs

  for point, row in zip(sweep.points, rows, strict=True):
    if row["status"] != runs.DONE and finished_only:
      continue
    if row["status"] != runs.DONE:
      raise SystemExit(f"point {point.name} is {row['status']}, not done: run the sweep to its end first "
                       "(or record the finished points: --finished_only)")
    block = {key: value for key, value in point.overrides.items() if not is_seed(key)}
    name = row_of(block) if row_of else ",".join(p for p in point.name.split(",") if not is_seed(p.split("=")[0]))
    grouped.setdefault(name or "base", []).append({**row, "workdir": sweep.workdir(root, point)})
  return grouped


def decode_cache_mib(workdir: str, length: int) -> float:
  """MiB of the decode cache of one row of `length` positions for the language model a run trained (its config,
  `max_length` raised to `length` where shorter), from shapes alone."""
  import math

  import jax
  import jax.numpy as jnp

  from jformer import config as config_lib
  from jformer import tasks
  from jformer.decode import generator

  config = config_lib.load_run(workdir)
  config.model.max_length = max(length, config.model.max_length)
  model = tasks.build_model(config)
  params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32))["params"])
  cache = jax.eval_shape(lambda p: generator.init_cache(model, p, 1, length), params)
  return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(cache)) / 2**20


def summarize(grouped: dict[str, list[dict]], decode_cache_at: int = 0) -> tuple[list[str], list[dict]]:
  """(contexts, one summary per row: seeds' valid bits per byte, means of the test contexts, steps, tokens/s, step
  memory; the decode cache at `decode_cache_at` positions when > 0)."""
  contexts = sorted({column[len(PREFIX):] for rows in grouped.values() for column in rows[0]
                     if column.startswith(PREFIX)}, key=int)
  summaries = []
  for name, rows in grouped.items():
    valid = [kept_valid(row, "valid_bits_per_byte", "eval_bits_per_byte") for row in rows]
    summaries.append({
        "row": name, "seeds": len(rows), "valid": valid, "valid_mean": statistics.fmean(valid),
        "test": {c: statistics.fmean(row[PREFIX + c] for row in rows) for c in contexts},
        "steps": statistics.fmean(row["step"] for row in rows),
        "tokens_per_second": statistics.fmean(row["tokens_per_second"] for row in rows),
        "step_temp_mib": (statistics.fmean(row["step_temp_mib"] for row in rows)
                          if all(row.get("step_temp_mib") is not None for row in rows) else None),
        "decode_cache_mib": decode_cache_mib(rows[0]["workdir"], decode_cache_at) if decode_cache_at else None,
        "xz": rows[0].get("xz_bits_per_byte")})
  return contexts, summaries


def kept_valid(row: dict, metric: str, last_key: str) -> float:
  """The valid `metric` of the checkpoint a run tested: its kept best (`train.keep_best`), else its last step's."""
  return row["tested_value"] if row.get("tested_value") is not None and metric_kept(row) == metric else row[last_key]


def metric_kept(row: dict) -> str | None:
  """The kept metric of a point's run (its results.json's `tested_metric`)."""
  return json.loads(pathlib.Path(row["workdir"], "results.json").read_text()).get("tested_metric")


def table(contexts: list[str], summaries: list[dict], decode_cache_at: int = 0) -> tuple[list[str], list[list[str]]]:
  xz = summaries[0]["xz"]
  memory = all(s["step_temp_mib"] is not None for s in summaries)
  headers = ["block", f"valid bpb (xz -9: {xz:.3f})" if xz else "valid bpb", "seeds", "seed spread",
             *(f"test bpb @{c}" if i == 0 else f"@{c}" for i, c in enumerate(contexts)), "steps", "tokens/s",
             *(["step temp MiB"] if memory else []),
             *([f"decode cache MiB @{decode_cache_at} (1 row)"] if decode_cache_at else [])]
  rows = [[s["row"], f"{s['valid_mean']:.3f}", " / ".join(f"{v:.3f}" for v in s["valid"]),
           f"{max(s['valid']) - min(s['valid']):.3f}", *(f"{s['test'][c]:.3f}" for c in contexts),
           f"{s['steps']:.0f}", f"{s['tokens_per_second']:,.0f}",
           *([f"{s['step_temp_mib']:.1f}"] if memory else []),
           *([f"{s['decode_cache_mib']:.2f}"] if decode_cache_at else [])] for s in summaries]
  return headers, rows


def plot(contexts: list[str], summaries: list[dict], path: str, title: str):
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  figure, (left, right) = plt.subplots(1, 2, figsize=(13, 0.45 * len(summaries) + 2.5))
  positions = range(len(summaries))[::-1]
  for y, s in zip(positions, summaries):
    left.scatter(s["valid"], [y] * len(s["valid"]), color="tab:blue", s=18)
    left.scatter([s["valid_mean"]], [y], marker="|", s=300, color="black")
  left.set_yticks(list(positions), [s["row"] for s in summaries])
  left.set(xlabel="valid bits per byte (dots: seeds, bar: mean)", title=title)
  left.grid(axis="x", alpha=0.3)
  lengths = [int(c) for c in contexts]
  for s in summaries:
    right.plot(lengths, [s["test"][c] for c in contexts], marker="o", label=s["row"])
  right.set_xscale("log", base=2)
  right.set_xticks(lengths, contexts)
  right.set(xlabel="context length (tokens)", ylabel="test bits per byte (mean of seeds)",
            title="length extrapolation (trained at the first context)")
  right.grid(alpha=0.3)
  right.legend(fontsize="small")
  figure.tight_layout()
  figure.savefig(path, format="png", dpi=100)
  plt.close(figure)
  print(f"wrote {path}")


def best_of_table(sweep, rows: list[dict]) -> tuple[list[str], list[list[str]], list[dict]]:
  """For a sweep file with FIGURE (launch/best_of.py): (headers, one row per sweep row with a cell per (panel, x):
  the best metric, the best_over value that gave it and that point's train seconds, "-" where no point has
  finished; the groups). Points not finished are left out, so a sweep may be recorded before its end."""
  from launch import best_of

  groups = best_of.best_points(sweep, rows)
  panels = list(dict.fromkeys(g["panel"] for g in groups))
  xs = sorted({g["x"] for g in groups})
  names = list(dict.fromkeys(g["row"] for g in groups))
  best = {(g["row"], g["panel"], g["x"]): g for g in groups}
  x_name = sweep.figure["x"].split(".")[-1]
  headers = ["row", *(f"{'/'.join(map(str, panel))}, {x_name} {x}" for panel in panels for x in xs)]
  cell = lambda g: "-" if g is None else f"{g['value']:.3f} ({g['best_over']}; {g['seconds']:.0f} s)"
  table_rows = [[name, *(cell(best.get((name, panel, x))) for panel in panels for x in xs)] for name in names]
  return headers, table_rows, groups


# (results key, column, format) of a translation sweep's table; AVERAGING_COLUMNS where its runs averaged
# checkpoints (jformer/train/averaging.py: "valid loss" is then the last step's).
TRANSLATION_COLUMNS = (("bleu", "test BLEU", "{:.2f}"), ("eval_loss", "valid loss", "{:.4f}"),
                       ("train_loss", "train loss", "{:.4f}"), ("step", "steps", "{:,}"),
                       ("tokens_per_second", "tokens/s", "{:,.0f}"))
VALID_BLEU_COLUMN = ("valid_bleu", "valid BLEU", "{:.2f}")
AVERAGING_COLUMNS = (("averaged_eval_loss", "averaged valid loss", "{:.4f}"), ("tested_params", "tested", "{}"))


def used_value(workdir: str, dotted_key: str):
  """The value of `dotted_key` that the run in `workdir` used (its config.json: after any recipe rule)."""
  value = json.loads(pathlib.Path(workdir, "config.json").read_text())
  for part in dotted_key.split("."):
    value = value[part]
  return value


def valid_bleu(workdir: str) -> float | None:
  """The valid BLEU `jformer evaluate --workdir=W --split=valid` wrote into W (None where it has not run): the
  number to choose on where the valid losses do not compare (across vocabularies)."""
  written = sorted(pathlib.Path(workdir).glob("evaluate_valid_*.json"))
  return json.loads(written[-1].read_text()).get("bleu") if written else None


def translation_table(sweep, rows: list[dict], curves: dict, root: str) -> tuple[list[str], list[list[str]], dict]:
  """(headers, one row per point: its row name (the sweep's row_of) or swept values, the values its run used of
  the sweep's REPORT_KEYS, and TRANSLATION_COLUMNS (with valid BLEU where `jformer evaluate --split=valid` scored
  the points, AVERAGING_COLUMNS where they averaged checkpoints); {point: those values, its final metrics and its
  train and valid loss curves}); every point finished."""
  from launch import runs

  unfinished = [row["point"] for row in rows if row["status"] != runs.DONE]
  if unfinished:
    raise SystemExit(f"points {unfinished} are not done: run the sweep to its end first")
  named = [("row", lambda point: sweep.row_of(point.overrides))] if sweep.row_of else [
      (key, lambda point, key=key: point.overrides.get(key, "")) for key in sweep.keys]
  used = [(key, lambda point, key=key: used_value(sweep.workdir(root, point), key)) for key in sweep.report_keys]
  points_by_name = {point.name: point for point in sweep.points}
  rows = [{**row, "valid_bleu": valid_bleu(sweep.workdir(root, points_by_name[row["point"]]))} for row in rows]
  columns = ((VALID_BLEU_COLUMN,) if any(row["valid_bleu"] is not None for row in rows) else ()) + \
      TRANSLATION_COLUMNS + (AVERAGING_COLUMNS if any(row.get("averaged_eval_loss") for row in rows) else ())
  headers = [*(key for key, _ in named + used), *(column for _, column, _ in columns)]
  table_rows, points = [], {}
  for row in rows:
    point = points_by_name[row["point"]]
    values = {key: value(point) for key, value in named + used}
    table_rows.append([*map(str, values.values()),
                       *("-" if row[key] is None else form.format(row[key]) for key, _, form in columns)])
    points[row["point"]] = {**values, **{key: row[key] for key, _, _ in columns},
                            "curves": {tag: curves[row["point"]].get(tag, []) for tag in ("train/loss", "eval/loss")}}
  return headers, table_rows, points


def last_step_bleu(workdir: str, results: dict) -> float | None:
  """The test BLEU of a run's last step: the run's own where it tested its last step, else what `jformer evaluate
  --split=test --checkpoint=latest` wrote into the workdir (None where that has not run)."""
  if results.get("tested_step", results["step"]) == results["step"]:
    return results["bleu"]
  for path in sorted(pathlib.Path(workdir).glob("evaluate_test_*.json")):
    written = json.loads(path.read_text())
    if written.get("checkpoint_used") == "latest":
      return written["bleu"]
  return None


def seeds_translation_table(sweep, grouped: dict[str, list[dict]]) -> tuple[list[str], list[list[str]], dict]:
  """A translation sweep with seeds whose runs kept their best checkpoint (`train.keep_best`): (headers, one row per
  group of seeds: the values its runs used of REPORT_KEYS, the test BLEU of the tested (kept) checkpoint (mean,
  each seed, spread), the last step's (mean), the kept valid BLEU (mean), the tested steps, the last step's valid
  and train loss (means); {row: its values and each seed's})."""
  headers = ["row", *sweep.report_keys, "seeds", "test BLEU (kept)", "each seed", "seed spread",
             "last step's test BLEU", "valid BLEU (kept)", "tested steps", "steps", "valid loss (last)",
             "train loss (last)"]
  table_rows, summaries = [], {}
  for name, rows in grouped.items():
    results = [json.loads(pathlib.Path(row["workdir"], "results.json").read_text()) for row in rows]
    bleu = [r["bleu"] for r in results]
    last = [last_step_bleu(row["workdir"], r) for row, r in zip(rows, results)]
    summary = {"used": {key: used_value(rows[0]["workdir"], key) for key in sweep.report_keys},
               "seeds": [used_value(row["workdir"], "train.seed") for row in rows],
               "bleu": bleu, "bleu_mean": statistics.fmean(bleu), "last_step_bleu": last,
               **{key: [r.get(key) for r in results] for key in ("tested_value", "tested_step", "step", "eval_loss",
                                                                  "train_loss", "kept_history")}}
    summaries[name] = summary
    known = [x for x in last if x is not None]
    table_rows.append([
        name, *map(str, summary["used"].values()), str(len(rows)), f"{summary['bleu_mean']:.2f}",
        " / ".join(f"{b:.2f}" for b in bleu), f"{max(bleu) - min(bleu):.2f}" if len(bleu) > 1 else "-",
        f"{statistics.fmean(known):.2f}" + ("" if len(known) == len(last) else f" ({len(known)} of {len(last)})")
        if known else "-",
        f"{statistics.fmean(summary['tested_value']):.2f}",
        " / ".join(str(s) for s in summary["tested_step"]), " / ".join(f"{s:,}" for s in summary["step"]),
        f"{statistics.fmean(summary['eval_loss']):.4f}", f"{statistics.fmean(summary['train_loss']):.4f}"])
  return headers, table_rows, summaries


def plot_seeds_bleu(summaries: dict[str, dict], path: str, title: str):
  """Each row's test BLEU per seed: the tested (kept) checkpoint's (dots, the mean a bar) and the last step's
  (crosses)."""
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  figure, ax = plt.subplots(figsize=(9, 0.5 * len(summaries) + 2))
  positions = range(len(summaries))[::-1]
  for y, (name, s) in zip(positions, summaries.items()):
    ax.scatter(s["bleu"], [y] * len(s["bleu"]), color="tab:blue", s=22, label="kept checkpoint" if y == 0 else None)
    last = [x for x in s["last_step_bleu"] if x is not None]
    ax.scatter(last, [y - 0.15] * len(last), color="tab:orange", marker="x", s=22,
               label="last step" if y == 0 else None)
    ax.scatter([s["bleu_mean"]], [y], marker="|", s=300, color="black")
  ax.set_yticks(list(positions), list(summaries))
  ax.set(xlabel="test BLEU (dots: seeds of the kept checkpoint, bar: their mean; crosses: the last step)",
         title=title)
  ax.grid(axis="x", alpha=0.3)
  ax.legend(fontsize="small")
  figure.tight_layout()
  figure.savefig(path, format="png", dpi=100)
  plt.close(figure)
  print(f"wrote {path}")


def machine(args) -> dict:
  """`common.machine()` with the command that ran the sweep before the one that recorded it."""
  info = common.machine()
  info["command"] = f"jformer launch --sweep={args.sweep} --root={args.root} && {info['command']}"
  return info


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sweep", required=True, help="the sweep file, e.g. configs/sweeps/lm_blocks.py")
  parser.add_argument("--root", default="runs", help="folder holding <sweep>/<point>/ workdirs")
  parser.add_argument("--json", required=True, help="the results JSON to write (benchmarks/results/...)")
  parser.add_argument("--figure", required=True, help="the PNG to write (docs/results/...)")
  parser.add_argument("--title", default="", help="the table's title (default: kept from --json)")
  parser.add_argument("--setup", default="", help="what was run (default: kept from --json)")
  parser.add_argument("--findings", default="", help="JSON file: a list of {text, rows, seeds} (default: kept "
                      "from --json)")
  parser.add_argument("--finished_only", action="store_true", help="record the finished points of a sweep with "
                      "seeds (the others left out; say so in --setup)")
  parser.add_argument("--decode_cache_at", type=int, default=0, help="add the decode cache of one row of this many "
                      "positions per row (language models; 0: no such column)")
  args = parser.parse_args()
  common.setup()
  from launch import report
  from launch import sweep as sweep_lib

  sweep = sweep_lib.load(args.sweep)
  kept = json.loads(pathlib.Path(args.json).read_text()) if os.path.exists(args.json) else {}
  findings = json.loads(pathlib.Path(args.findings).read_text()) if args.findings else kept.get("findings", [])
  title = args.title or kept.get("title") or f"sweep {sweep.name}"
  report_rows, curves = report.collect(sweep, args.root)
  seeded = any(is_seed(key) for key in sweep.keys)
  if seeded and any(row.get("bleu") is not None and row.get("tested_step") is not None for row in report_rows):
    grouped = groups(sweep, report_rows, sweep.row_of, args.root, args.finished_only)  # seeds of kept checkpoints.
    headers, rows, points = seeds_translation_table(sweep, grouped)
    plot_seeds_bleu(points, args.figure, title)
  elif any(row.get("bleu") is not None for row in report_rows):  # translation: each point and its curves.
    headers, rows, points = translation_table(sweep, report_rows, curves, args.root)
    named = {point.name: sweep.row_of(point.overrides) for point in sweep.points} if sweep.row_of else {}
    report.plot({named.get(name, name): curve for name, curve in curves.items()}, args.figure, title)
  elif sweep.figure:  # the best point per group (e.g. per learning rate), as `jformer sweep-report` draws it.
    from launch import best_of

    headers, rows, points = best_of_table(sweep, report_rows)
    best_of.plot(points, sweep.figure, args.figure, title)
    points = {f"{g['row']} {g['panel']} {g['x']}": g for g in points}
  else:
    contexts, summaries = summarize(groups(sweep, report_rows, sweep.row_of, args.root, args.finished_only),
                                    args.decode_cache_at)
    headers, rows = table(contexts, summaries, args.decode_cache_at)
    plot(contexts, summaries, args.figure, title)
    points = {s["row"]: s for s in summaries}
  print(common.markdown_table(headers, rows))
  figure = os.path.relpath(args.figure, start=os.path.join(common.REPO, "docs", "results"))
  common.write_json(args.json, {
      "benchmark": "sweep", "machine": machine(args), "title": title,
      "setup": args.setup or kept.get("setup", ""), "headers": headers, "rows": rows, "figure": figure,
      "findings": findings, "points": points})
  if not findings:
    print(f"note: no findings yet: write them ([{{text, rows, seeds}}]) and pass --findings, or edit {args.json}")


if __name__ == "__main__":
  main()
