"""The block ablation sweep (configs/sweeps/lm_blocks.py) and its record (benchmarks/record_sweep.py): the rows are
the blocks the sweep claims, each with two seeds; the gated block keeps the feed-forward's parameters; the record
groups the seeds of a row, averages them and shows their spread."""

import dataclasses
import functools
import json

import pytest

from jformer import config as config_lib
from jformer import tasks
from jformer.models import summary
from launch import runs, sweep

SWEEP = "configs/sweeps/lm_blocks.py"


@pytest.fixture
def module(repo_root):
  return config_lib.import_file(repo_root / SWEEP, "sweep", "")


def test_rows_are_paper_pre_ln_modern_and_modern_less_each_option(repo_root, module, monkeypatch):
  monkeypatch.chdir(repo_root)
  loaded = sweep.load(SWEEP)
  rows = [module.row_of(p.overrides) for p in loaded.points]
  names = ["paper", "pre-LN", "modern", "modern -rmsnorm", "modern -swiglu", "modern -rotary", "modern -qk_norm",
           "modern -z_loss", "modern -no_bias"]
  assert rows == [name for name in names for _ in module.SEEDS]
  assert [(p.overrides["train.seed"], p.overrides["data.seed"]) for p in loaded.points] == [(0, 0), (1, 1)] * 9
  pre_ln = module.PRE_LN
  assert loaded.points[2].overrides == {"train.seed": 0, "data.seed": 0}  # pre-LN: the FIXED block.
  demo = config_lib.load(repo_root / loaded.base)  # the demo took the block that won: the modern one.
  assert {key: functools.reduce(getattr, key.split("."), demo) for key in pre_ln} == {**pre_ln, **module.MODERN}
  modern = module.ROWS["modern"]
  for option, keys in module.REMOVALS.items():  # each removal puts exactly its keys back to the pre-LN block.
    removed = {**pre_ln, **module.ROWS[f"modern -{option}"]}
    assert {k for k in modern if removed[k] != modern[k]} == set(keys)
    assert all(removed[k] == pre_ln[k] for k in keys)
  # The demo's peak learning rate, 256^-0.5 * 200^-0.5, reached after the sweep's shorter warm-up.
  fixed = module.FIXED
  peak = fixed["optimizer.learning_rate_scale"] * 256**-0.5 * fixed["optimizer.warmup_steps"]**-0.5
  assert peak == pytest.approx(256**-0.5 * 200**-0.5, rel=0.01)
  assert all(p.overrides.keys() <= set(pre_ln) | {"train.seed", "data.seed"} for p in loaded.points)


def test_swiglu_row_keeps_the_feed_forward_parameters(repo_root, module):
  def counts(row):
    overrides = {**module.PRE_LN, **module.ROWS[row]}
    config = config_lib.load(repo_root / "configs" / "lm_demo.py", {k: sweep.cli_value(v) for k, v in
                                                                      overrides.items()})
    return summary.count_by_module(summary.param_shapes(tasks.build_model(config)))["total"]

  gated, plain = counts("modern"), counts("modern -swiglu")
  # 4 layers x (3 x 256 x 683 - 2 x 256 x 1024) = 4 x 256 = 1,024 parameters more of 5.2M: the width rounds up.
  assert gated - plain == 4 * 256 * (3 * 683 - 2 * 1024) == 1024
  assert abs(gated - plain) / plain < 1e-3


def write_point(root, name, results):
  workdir = root / "blocks" / name
  workdir.mkdir(parents=True)
  (workdir / runs.RESULTS).write_text(json.dumps(results))
  (workdir / runs.EXIT_CODE).write_text("0\n")


def test_record_groups_seeds_into_rows_with_mean_and_spread(tmp_path, monkeypatch, repo_root):
  monkeypatch.syspath_prepend(str(repo_root / "benchmarks"))
  import record_sweep
  from launch import report

  points = [{"model.norm": norm, "train.seed": seed} for norm in ("post", "pre") for seed in (0, 1)]
  names = sweep.point_names(points)
  valid = {("post", 0): 2.0, ("post", 1): 2.25, ("pre", 0): 1.5, ("pre", 1): 1.5625}
  for name, point in zip(names, points):
    bits = valid[point["model.norm"], point["train.seed"]]
    write_point(tmp_path, name, {"step": 100 + point["train.seed"], "eval_bits_per_byte": bits,
                                 "xz_bits_per_byte": 2.0914, "test_bits_per_byte_at": {"512": bits + 1, "256": bits},
                                 "tokens_per_second": 1000.0 * (1 + point["train.seed"]),
                                 "step_temp_mib": 10.0 + point["train.seed"]})
  blocks = sweep.Sweep("blocks", "configs/lm_demo.py", {}, tuple(sweep.Point(n, p, 100) for n, p in zip(names,
                                                                                                      points)))
  grouped = record_sweep.groups(blocks, report.collect(blocks, str(tmp_path))[0], row_of=None, root=str(tmp_path))
  assert list(grouped) == ["norm=post", "norm=pre"] and all(len(rows) == 2 for rows in grouped.values())
  contexts, summaries = record_sweep.summarize(grouped)
  assert contexts == ["256", "512"]
  headers, rows = record_sweep.table(contexts, summaries)
  assert headers == ["block", "valid bpb (xz -9: 2.091)", "seeds", "seed spread", "test bpb @256", "@512", "steps",
                     "tokens/s", "step temp MiB"]
  assert rows[0] == ["norm=post", "2.125", "2.000 / 2.250", "0.250", "2.125", "3.125", "100", "1,500", "10.5"]
  assert rows[1][1:4] == ["1.531", "1.500 / 1.562", "0.062"]
  record_sweep.plot(contexts, summaries, str(tmp_path / "blocks.png"), "blocks")
  assert (tmp_path / "blocks.png").read_bytes().startswith(b"\x89PNG")

  (tmp_path / "blocks" / names[3] / runs.RESULTS).unlink()  # a point not finished: nothing is recorded.
  with pytest.raises(SystemExit, match="not done: run the sweep to its end first"):
    record_sweep.groups(blocks, report.collect(blocks, str(tmp_path))[0], row_of=None, root=str(tmp_path))


def test_a_translation_sweep_is_recorded_one_row_per_point_with_its_curves(tmp_path, monkeypatch, repo_root):
  """The demo_dtypes kind of sweep (its points score BLEU): one row per point with its swept values and final
  metrics, the curves in the JSON's points, and nothing recorded while a point is unfinished."""
  monkeypatch.syspath_prepend(str(repo_root / "benchmarks"))
  import record_sweep
  from launch import report

  points = [{"model.dtype": dtype, "train.seed": 0} for dtype in ("float32", "bfloat16")]
  names = sweep.point_names(points)
  for name, point in zip(names, points):
    write_point(tmp_path, name, {"step": 1487, "bleu": 20.5 if point["model.dtype"] == "float32" else 20.75,
                                 "eval_loss": 2.8125, "train_loss": 2.5625, "tokens_per_second": 5000.4})
  dtypes = sweep.Sweep("blocks", "configs/demo.py", {}, tuple(sweep.Point(n, p, 1487) for n, p in zip(names, points)))
  rows, curves = report.collect(dtypes, str(tmp_path))
  curves[names[0]] = {"eval/loss": [(500, 4.5), (1487, 2.8125)]}
  headers, table_rows, recorded = record_sweep.translation_table(dtypes, rows, curves, str(tmp_path))
  assert headers == ["model.dtype", "train.seed", "test BLEU", "valid loss", "train loss", "steps", "tokens/s"]
  assert table_rows == [["float32", "0", "20.50", "2.8125", "2.5625", "1,487", "5,000"],
                        ["bfloat16", "0", "20.75", "2.8125", "2.5625", "1,487", "5,000"]]
  assert recorded[names[0]]["curves"] == {"train/loss": [], "eval/loss": [(500, 4.5), (1487, 2.8125)]}
  assert recorded[names[1]]["bleu"] == 20.75

  # Named by the sweep's row_of, with the value of each REPORT_KEYS key its run used (a recipe's choice).
  for name, vocab in zip(names, (2000, 8000)):
    (tmp_path / "blocks" / name / "config.json").write_text(json.dumps({"model": {"vocab_size": vocab}}))
  named = dataclasses.replace(dtypes, row_of=lambda overrides: f"{overrides['model.dtype']} row",
                              report_keys=("model.vocab_size",))
  headers, table_rows, recorded = record_sweep.translation_table(named, rows, curves, str(tmp_path))
  assert headers[:3] == ["row", "model.vocab_size", "test BLEU"]
  assert [r[:3] for r in table_rows] == [["float32 row", "2000", "20.50"], ["bfloat16 row", "8000", "20.75"]]
  assert recorded[names[1]]["model.vocab_size"] == 8000 and recorded[names[1]]["row"] == "bfloat16 row"
  # Runs that averaged checkpoints: their mean's valid loss and which parameters were tested.
  results = json.loads((tmp_path / "blocks" / names[0] / runs.RESULTS).read_text())
  (tmp_path / "blocks" / names[0] / runs.RESULTS).write_text(json.dumps(
      {**results, "averaged_eval_loss": 2.75, "tested_params": "averaged"}))
  headers, table_rows, _ = record_sweep.translation_table(named, report.collect(named, str(tmp_path))[0], curves,
                                                          str(tmp_path))
  assert headers[-2:] == ["averaged valid loss", "tested"] and table_rows[0][-2:] == ["2.7500", "averaged"]
  assert table_rows[1][-2:] == ["-", "-"]  # a run without averaging.
  # Points that `jformer evaluate --split=valid` scored: their valid BLEU before the test BLEU.
  (tmp_path / "blocks" / names[1] / "evaluate_valid_64.json").write_text(json.dumps({"bleu": 19.5, "loss": 2.9}))
  headers, table_rows, recorded = record_sweep.translation_table(named, report.collect(named, str(tmp_path))[0],
                                                                 curves, str(tmp_path))
  assert headers[2:4] == ["valid BLEU", "test BLEU"] and [r[2] for r in table_rows] == ["-", "19.50"]
  assert recorded[names[1]]["valid_bleu"] == 19.5

  (tmp_path / "blocks" / names[1] / runs.RESULTS).unlink()
  with pytest.raises(SystemExit, match="not done: run the sweep to its end first"):
    record_sweep.translation_table(dtypes, report.collect(dtypes, str(tmp_path))[0], curves, str(tmp_path))
