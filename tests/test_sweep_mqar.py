"""The Zoology grid sweep (configs/sweeps/mqar.py): every variant over the widths and learning rates at the first
(length, pairs), every variant but additive at the middle rate at the longer ones, each point a valid config whose
generator and model agree on the length and which trains for its point's steps."""

from __future__ import annotations

import itertools
import runpy

from jformer import config as config_lib


def test_mqar_grid_expands_to_its_variants_lengths_widths_and_rates(repo_root, monkeypatch):
  from launch import sweep

  monkeypatch.chdir(repo_root)
  grid = sweep.load("configs/sweeps/mqar.py")
  module = runpy.run_path("configs/sweeps/mqar.py")
  assert len(grid.points) == 6 * 3 * 3 + 5 * 3 == 69
  seen = set()
  for point in grid.points:
    o = point.overrides
    assert o["data.dataset_options.seq_len"] == o["data.max_length"] == o["model.max_length"]
    assert o["data.batch_size"] * o["data.max_length"] == 4096  # the same answers per step at every length
    assert o["model.d_ff"] == 4 * o["model.d_model"]
    assert point.steps == o["train.steps"] == {64: 500, 128: 3000}[o["data.max_length"]]
    seen.add((module["row_of"](o), (o["data.dataset_options.seq_len"], o["data.dataset_options.num_kv_pairs"]),
              o["model.d_model"], o["optimizer.learning_rate_scale"]))
  variants, (first, longer), widths, rates = (module[k] for k in ("VARIANTS", "GRID", "WIDTHS",
                                                                     "LEARNING_RATE_SCALES"))
  assert seen == (set(itertools.product(variants, [first], widths, rates))
                  | set(itertools.product([v for v in variants if v != "additive"], [longer], widths, [0.25])))
  last_hybrid = next(p for p in reversed(grid.points) if module["row_of"](p.overrides).startswith("hybrid"))
  hybrid = config_lib.load(repo_root / grid.base, {k: sweep.cli_value(v) for k, v in last_hybrid.overrides.items()})
  assert hybrid.model.layer_pattern == ("linear", "softmax") and hybrid.model.num_decoder_layers == 2
  assert hybrid.data.dataset_options.num_kv_pairs == 8 and hybrid.model.d_model == 128


def test_report_keeps_the_best_rate_per_group_and_draws_it(tmp_path, monkeypatch, repo_root):
  """Two rows x two widths x two rates, one panel: each (row, width) keeps its better rate; a group whose points
  have no accuracy yet is left out; report.md holds the table and best.png the figure."""
  import json

  from launch import best_of, report, runs, sweep

  points = [{"model.attention": a, "model.d_model": d, "optimizer.learning_rate_scale": lr}
            for a in ("dot_product", "linear") for d in (32, 64) for lr in (0.1, 0.6)]
  accuracy = {("dot_product", 32, 0.1): 0.5, ("dot_product", 32, 0.6): 0.9, ("dot_product", 64, 0.1): 1.0,
              ("dot_product", 64, 0.6): 0.2, ("linear", 32, 0.1): 0.1, ("linear", 32, 0.6): 0.3}
  names = sweep.point_names(points)
  for name, point in zip(names, points):
    workdir = tmp_path / "grid" / name
    workdir.mkdir(parents=True)
    value = accuracy.get(tuple(point.values()))
    if value is not None:  # linear at width 64 has not finished.
      (workdir / runs.RESULTS).write_text(json.dumps({"step": 10, "test_accuracy": value, "train_seconds": 12.0}))
      (workdir / runs.EXIT_CODE).write_text("0\n")
  grid = sweep.Sweep("grid", "configs/mqar.py", {}, tuple(sweep.Point(n, p, 10) for n, p in zip(names, points)),
                     figure={"metric": "test_accuracy", "x": "model.d_model", "panels": (),
                             "best_over": "optimizer.learning_rate_scale"},
                     row_of=lambda overrides: overrides["model.attention"])
  groups = best_of.best_points(grid, report.collect(grid, str(tmp_path))[0])
  assert [(g["row"], g["x"], g["value"], g["best_over"]) for g in groups] == [
      ("dot_product", 32, 0.9, 0.6), ("dot_product", 64, 1.0, 0.1), ("linear", 32, 0.3, 0.6)]
  assert "| dot_product |  | 32 | 0.900 | 0.6 | 12 |" in best_of.markdown(groups, grid.figure)
  report.write(grid, str(tmp_path))
  assert "## Best test_accuracy per group" in (tmp_path / "grid" / "report.md").read_text()
  assert (tmp_path / "grid" / "best.png").read_bytes().startswith(b"\x89PNG")
  # benchmarks/record_sweep.py's table for docs/results: a cell per (panel, width), "-" where nothing finished.
  monkeypatch.syspath_prepend(str(repo_root / "benchmarks"))
  import record_sweep

  headers, rows, _ = record_sweep.best_of_table(grid, report.collect(grid, str(tmp_path))[0])
  assert headers == ["row", ", d_model 32", ", d_model 64"]
  assert rows == [["dot_product", "0.900 (0.6; 12 s)", "1.000 (0.1; 12 s)"], ["linear", "0.300 (0.6; 12 s)", "-"]]


def test_a_figure_without_its_keys_is_refused():
  import pytest

  from launch import best_of

  with pytest.raises(ValueError, match=r"FIGURE needs the keys \['metric', 'x', 'panels', 'best_over'\]"):
    best_of.check({"metric": "test_accuracy", "x": "model.d_model"})
