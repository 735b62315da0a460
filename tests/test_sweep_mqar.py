"""The Zoology grid sweep (configs/sweeps/mqar.py): every variant over every (length, pairs), width and learning
rate, each point a valid config whose generator and model agree on the length."""

from __future__ import annotations

import itertools
import runpy

from jformer import config as config_lib


def test_mqar_grid_expands_to_every_variant_length_width_and_rate(repo_root, monkeypatch):
  from launch import sweep

  monkeypatch.chdir(repo_root)
  grid = sweep.load("configs/sweeps/mqar.py")
  module = runpy.run_path("configs/sweeps/mqar.py")
  assert len(grid.points) == 6 * 3 * 3 * 3 == 162
  seen = set()
  for point in grid.points:
    o = point.overrides
    assert o["data.dataset_options.seq_len"] == o["data.max_length"] == o["model.max_length"]
    assert o["model.d_ff"] == 4 * o["model.d_model"]
    seen.add((module["row_of"](o), (o["data.dataset_options.seq_len"], o["data.dataset_options.num_kv_pairs"]),
              o["model.d_model"], o["optimizer.learning_rate_scale"]))
  assert seen == set(itertools.product(module["VARIANTS"], module["GRID"], module["WIDTHS"],
                                       module["LEARNING_RATE_SCALES"]))
  hybrid = config_lib.load(repo_root / grid.base, {k: sweep.cli_value(v) for k, v in grid.points[-1].overrides.items()})
  assert hybrid.model.layer_pattern == ("linear", "softmax") and hybrid.model.num_decoder_layers == 2
  assert hybrid.data.dataset_options.num_kv_pairs == 16 and hybrid.model.d_model == 128
