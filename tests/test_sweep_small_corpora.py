"""The small-corpus sweeps (configs/sweeps/demo_small_corpora.py, lm_small_text.py), their record
(benchmarks/record_sweep.py: seeds of runs that kept their best checkpoint) and the small text they train on
(benchmarks/text_subset.py)."""

import json

import pytest

from helpers import import_benchmark
from launch import report, runs, sweep


def test_the_translation_sweep_has_every_size_and_dropout_with_two_seeds_the_help_demo_first(repo_root, monkeypatch):
  monkeypatch.chdir(repo_root)
  loaded = sweep.load("configs/sweeps/demo_small_corpora.py")
  rows = [(loaded.row_of(p.overrides), p.overrides["train.seed"]) for p in loaded.points]
  sized = [(f"gettext {size}, dropout {p}", seed) for size in ("5k", "50k", "18k") for seed in (0, 1) for p in (0.1, 0.3)]
  assert rows == [("help 18k, dropout 0.1", 0), *sized, ("help 18k, dropout 0.1", 1)]
  assert all(p.steps == 1350 and p.overrides.get("train.budget_minutes", 0.0) == 0.0 for p in loaded.points)
  assert loaded.fixed["train.budget_minutes"] == 0.0


def test_the_text_is_whole_chapters_within_the_bytes_in_corpus_order():
  text_subset = import_benchmark("text_subset")
  documents = ["a" * 10, "b" * 20, "c" * 30, "d" * 40]
  chosen = text_subset.cut(documents, 63, seed=0)
  assert sum(len(d) for d in chosen) + 2 * (len(chosen) - 1) + 1 <= 63 and len(chosen) >= 2
  assert chosen == sorted(chosen)  # in corpus order (here: alphabetical).
  assert text_subset.cut(documents, 200, seed=0) == documents


def write_point(root, name, results, seed):
  workdir = root / "small" / name
  workdir.mkdir(parents=True)
  (workdir / runs.RESULTS).write_text(json.dumps(results))
  (workdir / runs.EXIT_CODE).write_text("0\n")
  (workdir / "config.json").write_text(json.dumps({"train": {"seed": seed}, "model": {"dropout_rate": 0.1}}))
  return workdir


def test_record_groups_the_seeds_of_kept_checkpoints_with_the_last_steps_bleu(tmp_path, monkeypatch, repo_root):
  monkeypatch.syspath_prepend(str(repo_root / "benchmarks"))
  import record_sweep

  points = [{"train.seed": seed} for seed in (0, 1, 2)]
  names = sweep.point_names(points)
  common = {"step": 1350, "eval_loss": 3.25, "train_loss": 1.5, "tokens_per_second": 1000.0}
  write_point(tmp_path, names[0], {**common, "bleu": 12.0, "tested_step": 1350, "tested_value": 15.0}, 0)
  latest = write_point(tmp_path, names[1], {**common, "bleu": 13.0, "tested_step": 1000, "tested_value": 16.0}, 1)
  (latest / "evaluate_test_64.json").write_text(json.dumps({"bleu": 11.5, "checkpoint_used": "latest"}))
  seeds = sweep.Sweep("small", "configs/demo.py", {}, tuple(sweep.Point(n, p, 1350) for n, p in zip(names, points)),
                      report_keys=("model.dropout_rate",))
  rows = report.collect(seeds, str(tmp_path))[0]
  with pytest.raises(SystemExit, match=r"not done: run the sweep to its end first \(or record the finished points"):
    record_sweep.groups(seeds, rows, None, str(tmp_path))
  grouped = record_sweep.groups(seeds, rows, None, str(tmp_path), finished_only=True)  # the third is not done.
  headers, table_rows, summaries = record_sweep.seeds_translation_table(seeds, grouped)
  assert headers[:9] == ["row", "model.dropout_rate", "seeds", "test BLEU (kept)", "each seed", "seed spread",
                         "last step's test BLEU", "valid BLEU (kept)", "tested steps"]
  # The first seed tested its last step (its own BLEU is the last step's); the second its step 1000.
  assert table_rows == [["base", "0.1", "2", "12.50", "12.00 / 13.00", "1.00", "11.75", "15.50", "1350 / 1000",
                         "1,350 / 1,350", "3.2500", "1.5000"]]
  assert summaries["base"]["last_step_bleu"] == [12.0, 11.5] and summaries["base"]["seeds"] == [0, 1]
