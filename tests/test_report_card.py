"""`jformer report-card` (jformer/report_card/): the fixed suite, how a card compares with the baseline's, the
cached dot_product row, and a card graded end to end on the plug-in variant of tests/plugins/."""

from __future__ import annotations

import dataclasses
import json
import math
import runpy

import pytest

from jformer import config as config_lib
from jformer import main
from jformer import report_card as rc
from jformer.report_card import card as card_lib
from jformer.report_card import leaderboard
from jformer.report_card import suite as suite_lib

PLUGIN = {"imports": "tests/plugins/learned_temperature.py", "model.attention": "learned_temperature"}


def test_suite_holds_the_first_mqar_grid_point_and_every_part_loads(repo_root):
  """The MQAR part is configs/sweeps/mqar.py's first GRID point (its grid_point overrides) at configs/mqar.py's width
  and rate; every part's config loads with the baseline's overrides; every metric reads an existing part."""
  suite = rc.default_suite()
  grid = runpy.run_path(str(repo_root / "configs" / "sweeps" / "mqar.py"))
  mqar = [part for part in suite.parts if part.name.startswith("mqar_")]
  assert [part.overrides for part in mqar] == [grid["grid_point"](*grid["GRID"][0])]
  for part in suite.parts:
    config = config_lib.load(repo_root / part.config, {**part.overrides, **rc.BASELINE})
    assert config.model.attention == "dot_product"
    if part.kind == "train_step":
      assert config.data.max_length * config.data.batch_size == suite_lib.TRAIN_STEP_LENGTH
    if part.name.startswith("mqar_"):
      assert config.model.d_model == 64 and config.optimizer.learning_rate_scale == 0.25
  names = {part.name for part in suite.parts}
  assert {metric.part for metric in suite.metrics} == names
  assert len({metric.name for metric in suite.metrics}) == len(suite.metrics) == 10


@pytest.mark.parametrize("overrides", [rc.BASELINE, leaderboard.board()["hybrid"]])
def test_every_training_part_trains_a_fixed_number_of_steps_whatever_the_machine(repo_root, overrides):
  """No training part has a time budget (which would train as many steps as fit the machine's speed): each trains
  its config's train.steps, the LM part LM_STEPS, whatever the variant."""
  for part in rc.default_suite().parts:
    if part.kind == "train":
      config = config_lib.load(repo_root / part.config, {**part.overrides, **overrides})
      assert config.train.budget_minutes == 0 and config.train.steps > 0, part.name
      assert part.name != "lm" or config.train.steps == suite_lib.LM_STEPS


def test_a_cached_baselines_time_and_memory_are_never_shown_beside_this_machines(monkeypatch, tmp_path):
  """The cached dot_product card (another CPU) lends only its learning figures: the card's time and memory column
  is the baseline measured in this command, and the card names where each came from."""
  suite = rc.default_suite()
  cached = {"variant": "dot_product", "overrides": rc.BASELINE, "command": "jformer report-card --remeasure",
            "values": {m.name: 1.0 for m in suite.metrics}, "total_seconds": 600.0,
            "machine": {"cpu": "another CPU", "cpu_flags": "avx", "cpus": 2, "backend": "cpu", "jax": "0.10.2",
                        "date": "2026-01-01", "commit": "abc"}}
  here = {"variant": "dot_product", "command": "jformer report-card ...", "total_seconds": 20.0,
          "values": {m.name: 2.0 for m in suite.measurements().metrics},
          "machine": {"cpu": "this CPU", "cpu_flags": "avx", "cpus": 2, "backend": "cpu", "jax": "0.10.2",
                      "date": "2026-12-07", "commit": "def"}}
  baseline = rc.beside(cached, here, suite)
  for metric in suite.metrics:
    assert baseline["values"][metric.name] == (2.0 if metric.compare == "ratio" else 1.0), metric.name
  text = card_lib.markdown({**here, "variant": "linear", "values": {m.name: 3.0 for m in suite.metrics}},
                           baseline, suite)
  assert "`dot_product`'s time and memory: measured in this command" in text and "this CPU" in text
  assert "`dot_product`'s learning: cached, 2026-01-01, commit abc" in text and "another CPU" in text
  assert "The baseline ran on another CPU" not in text


def test_only_a_variants_keys_may_be_overridden():
  rc.check_variant({**PLUGIN, "model.attention_options.window_size": "16", "model.layer_pattern": "(a, b)"})
  with pytest.raises(ValueError, match=r"--config.data.batch_size would change the suite.*--config.model.attention"):
    rc.check_variant({"model.attention": "linear", "data.batch_size": "2"})
  with pytest.raises(SystemExit, match="would change the suite"):
    main.main(["report-card", "--config.train.steps=3"])


def test_variant_names():
  assert rc.variant_name({}) == "dot_product"
  assert rc.variant_name(PLUGIN) == "learned_temperature"
  assert rc.variant_name({"model.attention": "local", "model.attention_options.window_size": "16"}) == (
      "local(window_size=16)")
  assert rc.variant_name({"model.layer_pattern": "('linear', 'softmax')"}) == "pattern(linear,softmax)"


def test_comparison_with_the_baseline():
  accuracy = suite_lib.Metric("a", "a", "p", "test_accuracy", True, "difference", 3)
  time = suite_lib.Metric("t", "t", "p", "ms", False, "ratio", 0)
  assert card_lib.comparison(accuracy, 0.9, 0.5) == "+0.400 (better)"
  assert card_lib.comparison(accuracy, 0.5, 0.9) == "-0.400 (worse)"
  assert card_lib.comparison(accuracy, 0.5, 0.5002) == "+0.000"  # equal as printed: neither better nor worse.
  bits = suite_lib.Metric("b", "b", "p", "test_bits_per_byte_at.256", False, "difference", 3)
  assert card_lib.comparison(bits, 1.6974, 1.6976) == "-0.001 (better)"  # 1.697 against 1.698, as printed
  assert card_lib.comparison(time, 300.0, 200.0) == "1.50x (worse)"
  assert card_lib.comparison(time, 100.0, 200.0) == "0.50x (better)"
  assert card_lib.comparison(time, None, 200.0) == "-"
  # The ETA: this machine's seconds of the parts run here times the parts' relative cost (the baseline's seconds).
  expected = {"a": 10.0, "b": 30.0, "c": 60.0}
  assert card_lib.remaining_seconds(["a", "b"], ["c"], 80.0, expected) == pytest.approx(120.0)
  assert card_lib.remaining_seconds(["a"], ["x"], 10.0, expected) is None
  assert card_lib.remaining_seconds([], ["b", "c"], 0.0, expected) is None  # none ran here: not the baseline's 90 s.


def test_the_eta_after_a_reused_part_comes_from_the_parts_run_here(monkeypatch, tmp_path):
  """Injected times, no clock: part a is reused (its seconds another machine's), b runs here 6.7x slower than the
  baseline, so c's ETA is 6.7x the baseline's, never the baseline's own."""
  parts = tuple(suite_lib.Part(n, n.upper(), "train", "configs/mqar.py") for n in "abc")
  taken = {"a": (999.0, True), "b": (67.0, False), "c": (200.0, False)}  # (seconds, reused)
  monkeypatch.setattr(card_lib, "timed_part", lambda part, overrides, workdir: ({}, *taken[part.name]))
  monkeypatch.setattr(card_lib.provenance, "machine", lambda *a, **k: {})
  said = []
  card = card_lib.grade({}, tmp_path, suite=suite_lib.Suite(parts, ()), expected={"a": 5.0, "b": 10.0, "c": 30.0},
                        say=said.append)
  done = [line.split("; ")[1] for line in said if " done in " in line]
  assert done[0].endswith("so far, the time left is known once a part has run here")
  assert done[1].endswith("so far, about 3m21s left")  # 67 s for b's 10: c's 30 take 201 s.
  assert done[2].endswith("so far, about 0m00s left") and card["seconds"] == {"a": 999.0, "b": 67.0, "c": 200.0}


def test_each_training_part_runs_every_seed_and_the_card_keeps_their_figures(monkeypatch, tmp_path):
  """Two seeds: a training part runs once per seed (train.seed 0 and 1, in seed_0/ and seed_1/), a measurement once;
  the card's value is the seeds' mean, `samples` keeps each, and the part's seconds are the seeds' sum."""
  parts = (suite_lib.Part("t", "T", "train", "configs/mqar.py"), suite_lib.Part("m", "M", "train_step", "c.py"))
  metrics = (suite_lib.Metric("t_accuracy", "t", "t", "test_accuracy", True, "difference", 3),
             suite_lib.Metric("m_ms", "m", "m", "ms", False, "ratio", 0))
  calls = []

  def timed_part(part, overrides, workdir):
    calls.append((part.name, overrides.get("train.seed"), workdir.relative_to(tmp_path).as_posix()))
    seed = overrides.get("train.seed", 0)
    return {"test_accuracy": 0.5 + 0.25 * seed, "ms": 10.0}, 3.0 + seed, False

  monkeypatch.setattr(card_lib, "timed_part", timed_part)
  monkeypatch.setattr(card_lib.provenance, "machine", lambda *a, **k: {})
  card = card_lib.grade({"model.attention": "linear"}, tmp_path, suite=suite_lib.Suite(parts, metrics), seeds=2,
                        say=lambda line: None)
  assert calls == [("t", 0, "t/seed_0"), ("t", 1, "t/seed_1"), ("m", None, "m")]
  assert card["samples"] == {"t_accuracy": [0.5, 0.75], "m_ms": [10.0]} and card["seeds"] == 2
  assert card["values"] == {"t_accuracy": 0.625, "m_ms": 10.0} and card["seconds"] == {"t": 7.0, "m": 3.0}
  baseline = {**card, "variant": "dot_product", "samples": {"t_accuracy": [0.70, 0.72], "m_ms": [5.0]},
              "values": {"t_accuracy": 0.71, "m_ms": 5.0}}
  table = card_lib.table(card, baseline, suite_lib.Suite(parts, metrics))
  assert "| t | 0.625 | 0.710 | -0.085 (within noise) |" in table  # 0.75 of seed 1 beats both of the baseline's.
  assert "| m | 10 | 5 | 2.00x (worse) |" in table
  with pytest.raises(ValueError, match="at least one seed"):
    card_lib.grade({}, tmp_path, suite=suite_lib.Suite(parts, metrics), seeds=0)


def test_later_seeds_reuse_the_first_seeds_text_and_vocabulary(tmp_path):
  """The LM part's second seed reads the first's prepared tfds data and SentencePiece model (neither depends on the
  seed); a synthetic task's run, which trains no vocabulary, shares nothing (its data is generated per seed)."""
  first = tmp_path / "lm" / "seed_0"
  assert card_lib.shared_preparation(first) == {}
  (first / "vocab").mkdir(parents=True)
  (first / "vocab" / "spm_8000.model").write_text("")
  assert card_lib.shared_preparation(first) == {"data.data_dir": str(first / "tfds"),
                                                "data.vocab_path": str(first / "vocab" / "spm_8000.model")}


def test_the_cached_dot_product_card_is_complete():
  """rows/dot_product.json: a number for every metric of the suite, and where, when and from what it was measured."""
  row = rc.cached_row("dot_product")
  assert row is not None, "docs/results/report_cards/dot_product.json is missing: run `jformer report-card --remeasure`"
  suite = rc.default_suite()
  assert set(row["values"]) == {metric.name for metric in suite.metrics}
  assert all(isinstance(v, float) and math.isfinite(v) for v in row["values"].values())
  assert set(row["seconds"]) == {part.name for part in suite.parts}
  assert row["overrides"] == rc.BASELINE and row["variant"] == "dot_product"
  for key in ("cpu", "cpu_flags", "date", "commit", "jax"):
    assert row["machine"][key]
  # What it claims about dot-product attention: MQAR's first point and induction solved, the LM below 2.5 bits.
  assert row["values"]["mqar_64x4_accuracy"] > 0.9 and row["values"]["induction_accuracy"] > 0.9
  assert row["values"]["lm_bits_per_byte_256"] < 2.5


@pytest.mark.integration
def test_report_card_grades_the_plugin_variant(tmp_path, repo_root, monkeypatch):
  """The plug-in variant graded on a shortened suite (MQAR and induction for 20 steps, the train step of a 1-layer LM at
  8 x 32 tokens), against a baseline card on another CPU: every metric has a figure, the files are written, the note
  says the times do not compare, and a second grading reuses the finished runs with their recorded seconds."""
  monkeypatch.chdir(repo_root)
  full = rc.default_suite()
  short = {"train.steps": 20, "train.eval_every": 20, "train.log_every": 10, "train.checkpoint_every": 20,
           "data.eval_batch_size": 40}  # rows divisible by the tests' 8 devices
  parts = [dataclasses.replace(full.part("mqar_64x4"), overrides={**full.part("mqar_64x4").overrides, **short}),
           dataclasses.replace(full.part("induction"), overrides=short),
           dataclasses.replace(full.part("train_step"), overrides={"data.max_length": 32, "data.batch_size": 8,
                                                                   "model.num_decoder_layers": 1}),
           full.part("decode_step")]
  suite = suite_lib.Suite(tuple(parts), tuple(m for m in full.metrics if m.part in {p.name for p in parts}))
  lines = []
  card = rc.grade(PLUGIN, tmp_path / "card", suite=suite, say=lines.append)
  assert lines[0].startswith("report card learned_temperature [1/4] MQAR 64 tokens, 4 pairs")
  assert lines[-1].startswith("report card learned_temperature [4/4] decode step at 1,024 positions done in")
  assert set(card["values"]) == {m.name for m in suite.metrics}
  assert all(0.0 <= card["values"][f"{p}_accuracy"] <= 1.0 for p in ("mqar_64x4", "induction"))
  assert card["values"]["train_step_ms"] > 0 and card["values"]["train_step_temp_mib"] > 0
  # The decode state: 4 layers x keys and values x 8 rows x 1,024 positions x 256 float32 = 64 MiB, and counters.
  assert card["values"]["decode_state_mib"] == pytest.approx(64.0, abs=0.01)

  baseline = json.loads(json.dumps(card))
  baseline.update(variant="dot_product", overrides=rc.BASELINE)
  baseline["machine"]["cpu"] = "another CPU"
  baseline["values"]["train_step_ms"] = card["values"]["train_step_ms"] / 2
  baseline["samples"]["train_step_ms"] = [ms / 2 for ms in card["samples"]["train_step_ms"]]
  paths = rc.write(card, baseline, tmp_path / "card", suite)
  text = open(paths["report_card.md"]).read()
  assert "| train step ms, 2,048 tokens |" in text and "2.00x (worse)" in text
  assert "The baseline ran on another CPU" in text
  assert json.loads(open(paths["report_card.json"]).read())["values"] == card["values"]
  assert open(paths["report_card.png"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"

  trained = suite_lib.Suite(tuple(p for p in parts if p.kind == "train"),
                           tuple(m for m in suite.metrics if m.part in {"mqar_64x4", "induction"}))
  again = rc.grade(PLUGIN, tmp_path / "card", suite=trained, say=lambda line: None)  # the measurements run anew.
  assert again["values"]["mqar_64x4_accuracy"] == card["values"]["mqar_64x4_accuracy"]
  assert again["seconds"]["mqar_64x4"] == pytest.approx(card["seconds"]["mqar_64x4"], abs=0.1)
