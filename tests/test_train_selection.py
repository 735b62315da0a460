"""The best checkpoint by a valid metric and patience (jformer/train/selection.py): which step is best, that its
checkpoint survives `train.keep_checkpoints` and is the one tested and loaded, resume, and patience's stop. The
metric's values are injected (a table by step), so the right answer is known."""

import json
import logging
import re
import shutil
import threading
import time
import types

import grain
import jax.numpy as jnp
import numpy as np
import pytest
from grain import checkpoint as grain_checkpoint

from helpers import SMALL, load_tiny
from jformer import checkpoint, main, tasks
from jformer import config as config_lib
from jformer.train import budget as budget_lib
from jformer.train import selection
from jformer.train.evaluation import evaluate_run
from jformer.train.loop import train_and_evaluate

# The valid BLEU of each evaluation (every 3 steps) in the constructed runs: step 6 is the best, steps 9-15 are not.
BLEU_BY_STEP = {3: 1.0, 6: 5.0, 9: 2.0, 12: 3.0, 15: 4.0, 18: 6.0}


def train_section(**values):
  return config_lib.run_settings(config_lib.load(SMALL, {f"train.{key}": value for key, value in values.items()})).train


def test_best_of_takes_the_first_best_value_and_counts_the_evaluations_after_it():
  history = [[3, 1.0], [6, 5.0], [9, 2.0], [12, 5.0], [15, 4.0]]
  assert selection.best_of(history, higher_is_better=True) == (6, 5.0, 3)  # a later tie (step 12) is no gain.
  assert selection.best_of(history, higher_is_better=False) == (3, 1.0, 4)
  assert selection.best_of([], higher_is_better=True) == (None, None, 0)


def test_valid_bleu_decodes_a_fixed_evenly_spaced_sample_of_the_valid_split():
  sources, references = [f"s{i}" for i in range(10)], [f"r{i}" for i in range(10)]
  config = config_lib.load(SMALL, {"train.valid_bleu_examples": 4})
  datasets = types.SimpleNamespace(raw_split=lambda split: (sources, references) if split == "valid" else None)
  task = tasks.TranslationTask(config, datasets, tokenizer=None)
  decoded = []
  task._bleu = lambda model, params, s, r: (decoded.append((s, r)) or 7.5, "", 0.0, s)
  assert task.kept_value("valid_bleu", {"loss": 2.0}, "model", lambda: "params") == 7.5
  assert decoded == [(["s0", "s3", "s6", "s9"], ["r0", "r3", "r6", "r9"])]
  assert task.kept_value("valid_loss", {"loss": 2.0}, "model", lambda: 1 / 0) == 2.0  # no decoding.


def saved_state(step: int) -> dict:
  return {"params": {"w": jnp.full((2,), float(step))}, "step": jnp.int32(step)}


class InjectedTask:
  """A task whose valid BLEU at each evaluation is BLEU_BY_STEP's (the step is the parameters' value here)."""
  kept_metrics = ("valid_loss", "valid_bleu")

  @staticmethod
  def kept_value(name, metrics, model, host_params):
    return BLEU_BY_STEP[int(host_params()["w"][0])]


def run_evaluations(workdir, kept_best, checkpointer, steps):
  """Saves steps (max_to_keep=1 beside the kept best) and scores each, as the loop does; the lines logged."""
  lines = []
  for step in steps:
    kept_best.score({"loss": 1.0}, None, lambda: saved_state(step)["params"])
    lines.append(kept_best.observe(step))
    checkpointer.save(step, saved_state(step), force=kept_best.step == step)
  checkpointer.wait()
  return lines


def test_the_best_step_survives_max_to_keep_resumes_and_is_the_one_chosen(tmp_path):
  directory = checkpoint.checkpoints_dir(tmp_path)
  train = train_section(keep_best="valid_bleu", patience=3)
  with checkpoint.Checkpointer(directory, max_to_keep=1, save_interval_steps=3) as ckpt:
    kept = selection.KeptBest(train, InjectedTask, tmp_path, ckpt)
    lines = run_evaluations(tmp_path, kept, ckpt, [3, 6, 9, 12])
    assert ckpt.all_steps() == [6, 12]  # the best beside the newest, though max_to_keep=1.
  assert lines[1] == " | valid_bleu 5 (best: kept)"
  assert lines[3] == " | valid_bleu 3 (best 5 at step 6; 2 of train.patience=3 without a gain)"
  assert checkpoint.read_best(tmp_path) == {"metric": "valid_bleu", "step": 6, "value": 5.0,
                                            "history": [[3, 1.0], [6, 5.0], [9, 2.0], [12, 3.0]]}
  assert checkpoint.which_params(tmp_path) == "6" and checkpoint.which_params(tmp_path, "latest") == "latest"
  np.testing.assert_array_equal(checkpoint.load_run_params(tmp_path)["w"], [6.0, 6.0])
  # Resumed (a new process): the best is kept again before the next save, and the count goes on.
  with checkpoint.Checkpointer(directory, max_to_keep=1, save_interval_steps=3) as ckpt:
    kept = selection.KeptBest(train, InjectedTask, tmp_path, ckpt)
    assert kept.step == 6 and not kept.exhausted()
    run_evaluations(tmp_path, kept, ckpt, [15])
    assert ckpt.all_steps() == [6, 15] and kept.exhausted()
    assert "no gain in valid_bleu over the last 3 evaluations (train.patience=3; best 5 at step 6)" in (
        kept.stop_line(15))
    params, results = kept.choose(15, {"w": np.zeros(2)})
  np.testing.assert_array_equal(params["w"], [6.0, 6.0])
  assert results["tested_step"] == 6 and results["tested_value"] == 5.0 and results["tested_metric"] == "valid_bleu"
  assert results["tested_why"] == "the best valid_bleu of 5 evaluations (train.keep_best)"
  assert selection.patience_ended(train, tmp_path) and not selection.patience_ended(
      train_section(keep_best="valid_bleu", patience=4), tmp_path)


def test_a_resume_forgets_evaluations_after_its_latest_checkpoint(tmp_path):
  """Killed after step 9's evaluation was written but before its checkpoint: the resumed run trains 9 again."""
  checkpoint.best_path(tmp_path).write_text(json.dumps(
      {"metric": "valid_bleu", "step": 9, "value": 9.0, "history": [[3, 1.0], [6, 5.0], [9, 9.0]]}))
  with checkpoint.Checkpointer(checkpoint.checkpoints_dir(tmp_path), max_to_keep=1) as ckpt:
    for step in (3, 6):
      ckpt.save(step, saved_state(step), force=True)
    kept = selection.KeptBest(train_section(keep_best="valid_bleu"), InjectedTask, tmp_path, ckpt)
  assert kept.history == [[3, 1.0], [6, 5.0]] and kept.step == 6


def named_best_on_disk(workdir) -> bool:
  """Whether best.json (if any) names a step whose checkpoint is complete on disk (its folder and manifest)."""
  step = checkpoint.read_best(workdir).get("step")
  return step is None or (checkpoint.checkpoints_dir(workdir) / str(step) / "MANIFEST").is_file()


def test_best_json_names_a_step_only_once_its_checkpoint_is_on_disk(tmp_path, monkeypatch):
  """The kill window: step 18's evaluation is a new best and its asynchronous save is under way (the writer of its
  data item held). A kill then leaves best.json naming step 6, on disk, which a fresh loader loads; once step 18's
  save is on disk best.json names it. Between every evaluation and save, best.json names a step on disk (with
  max_to_keep=1, the best it names is not deleted while a newer best is still being saved)."""
  release, held = threading.Event(), threading.Event()
  save_data = grain_checkpoint.CheckpointHandler.save

  def hold_step_18(handler, directory, *args, **kwargs):
    if "18.orbax-checkpoint-tmp" in str(directory):
      held.set()
      release.wait(120)
    return save_data(handler, directory, *args, **kwargs)

  monkeypatch.setattr(grain_checkpoint.CheckpointHandler, "save", hold_step_18)
  directory = checkpoint.checkpoints_dir(tmp_path)
  data = iter(grain.MapDataset.range(100).to_iter_dataset())
  with checkpoint.Checkpointer(directory, max_to_keep=1, save_interval_steps=3) as ckpt:
    kept = selection.KeptBest(train_section(keep_best="valid_bleu"), InjectedTask, tmp_path, ckpt)
    for step in (3, 6, 18):
      kept.score({"loss": 1.0}, None, lambda: saved_state(step)["params"])
      kept.observe(step)  # 3: 1.0, 6: 5.0, 18: 6.0, each a new best.
      assert kept.step == step and named_best_on_disk(tmp_path)
      if step < 18:
        ckpt.save(step, saved_state(step), data, force=True)
        assert named_best_on_disk(tmp_path)
    saving = threading.Thread(target=ckpt.save, args=(18, saved_state(18), data), kwargs={"force": True})
    saving.start()
    try:
      assert held.wait(60), "the save of step 18 never started"
      # SIGKILL here: what is on disk is what the next command reads.
      assert "18" not in [path.name for path in directory.iterdir()]
      assert checkpoint.read_best(tmp_path)["step"] == 6 and named_best_on_disk(tmp_path)
      params, which = checkpoint.run_params(tmp_path)
      assert which == f"step 6 of {directory}" and params["w"].tolist() == [6.0, 6.0]
    finally:
      release.set()
      saving.join()
  assert checkpoint.read_best(tmp_path) == {"metric": "valid_bleu", "step": 18, "value": 6.0,
                                            "history": [[3, 1.0], [6, 5.0], [18, 6.0]]}
  assert named_best_on_disk(tmp_path) and checkpoint.run_params(tmp_path)[1] == f"step 18 of {directory}"


def test_a_best_json_naming_a_missing_step_loads_the_latest_in_one_line(tmp_path, caplog, capsys):
  """A best.json naming a step that is not on disk (written so by an older jformer before a kill, or the step's
  folder deleted): the default loads the latest step after one warning naming both and the fix; --checkpoint=best
  is refused in one line naming --checkpoint=latest; a resumed run chooses its best afresh."""
  directory = checkpoint.checkpoints_dir(tmp_path)
  with checkpoint.Checkpointer(directory, max_to_keep=None) as ckpt:
    for step in (3, 6, 9):
      ckpt.save(step, saved_state(step), force=True)
  checkpoint.best_path(tmp_path).write_text(json.dumps(
      {"metric": "valid_bleu", "step": 6, "value": 5.0, "history": [[3, 1.0], [6, 5.0], [9, 2.0]]}))
  shutil.rmtree(directory / "6")
  missing = (f"{checkpoint.best_path(tmp_path)} names step 6 as the best checkpoint, but {directory} has no step 6 "
             "(the run was stopped before its save finished, or the folder was deleted)")
  with caplog.at_level(logging.WARNING):
    params, which = checkpoint.run_params(tmp_path)
  assert which == f"step 9 of {directory}" and params["w"].tolist() == [9.0, 9.0]
  said = [record.getMessage() for record in caplog.records if "best.json" in record.getMessage()]
  assert said == [f"{missing}; loading the latest checkpoint instead (--checkpoint=latest)"]
  with pytest.raises(FileNotFoundError) as refused:
    checkpoint.which_params(tmp_path, "best")
  assert str(refused.value) == f"{missing}; use --checkpoint=latest, or a step number that is there"
  with checkpoint.Checkpointer(directory, max_to_keep=None) as ckpt:
    kept = selection.KeptBest(train_section(keep_best="valid_bleu"), InjectedTask, tmp_path, ckpt)
  assert kept.step is None and kept.history == []
  assert (f"keep_best: the best checkpoint, step 6, is not in {directory}: the best checkpoint is chosen afresh "
          "from the next evaluation") in capsys.readouterr().out


def test_which_params_without_a_kept_best(tmp_path):
  assert checkpoint.which_params(tmp_path) == "latest"
  with pytest.raises(FileNotFoundError, match=r"kept no best checkpoint .* use --checkpoint=latest"):
    checkpoint.which_params(tmp_path, "best")


@pytest.mark.parametrize("overrides, message", [
    ({"train.keep_best": "valid_bits_per_byte"}, r"train.keep_best='valid_bits_per_byte' is not a metric of "
     r"model.architecture='transformer'; it keeps valid_loss, valid_bleu \(or 'none'\)"),
    ({"train.patience": 3}, r"train.patience=3 counts evaluations without a gain in train.keep_best's metric, "
     r"which is 'none'; set train.keep_best"),
    ({"train.keep_best": "valid_loss", "train.average_checkpoints": 5}, r"both choose the parameters the final "
     r"test uses; set train.keep_best='none' or train.average_checkpoints=0"),
    ({"train.keep_best": "bleu"}, r"train.keep_best='bleu' is not one of 'none', 'valid_loss', 'valid_bleu', "
     r"'valid_bits_per_byte'"),
])
def test_config_refuses_a_kept_metric_it_cannot_keep(overrides, message):
  with pytest.raises(ValueError, match=message):
    config_lib.load(SMALL, overrides)


@pytest.fixture
def injected_bleu(monkeypatch):
  """The valid BLEU of the run's k-th evaluation (step 3k: the runs evaluate every 3 steps) is BLEU_BY_STEP[3k]."""
  def score(self, metrics, model, host_params):
    self._value = BLEU_BY_STEP[3 * (len(self.history) + 1)]
    return {"bleu": self._value}

  monkeypatch.setattr(selection.KeptBest, "score", score)


def tiny_run(corpus, **extra):
  return load_tiny(corpus, **{"train.keep_best": "valid_bleu", "train.eval_every": 3, "train.checkpoint_every": 3,
                              "train.keep_checkpoints": 1, "train.bleu_examples": 4, **extra})


@pytest.mark.integration
def test_a_run_tests_its_best_checkpoint_and_a_resume_keeps_both(tiny_corpus, tmp_path, injected_bleu, capsys):
  workdir = tmp_path / "run"
  results = train_and_evaluate(tiny_run(tiny_corpus, **{"train.steps": 9}), workdir)
  assert results["tested_step"] == 6 and results["tested_value"] == 5.0 and results["step"] == 9
  assert "keep_best: the final test uses step 6: the best valid_bleu of 3 evaluations" in capsys.readouterr().out
  # Trained on (train.steps raised): resumed from the latest, step 6 still kept beside it and tested.
  results = train_and_evaluate(tiny_run(tiny_corpus, **{"train.steps": 15}), workdir)
  out = capsys.readouterr().out
  assert "resumed from step 9" in out and "eval step 12:" in out and "eval step 9:" not in out
  with checkpoint.Checkpointer(checkpoint.checkpoints_dir(workdir), read_only=True) as ckpt:
    assert ckpt.all_steps() == [6, 15]
  assert results["tested_step"] == 6 and results["kept_history"] == [[s, BLEU_BY_STEP[s]] for s in (3, 6, 9, 12, 15)]
  evaluated, _ = evaluate_run(workdir, split="test")  # --checkpoint=auto: the tested step.
  assert evaluated["checkpoint_used"] == "6" and evaluated["bleu"] == pytest.approx(results["bleu"])
  assert evaluate_run(workdir, split="test", which="latest")[0]["checkpoint_used"] == "latest"
  shutil.rmtree(checkpoint.checkpoints_dir(workdir) / "6")  # best.json now names a step that is not on disk.
  assert evaluate_run(workdir, split="test")[0]["checkpoint_used"] == "latest"  # after one warning (test above).
  with pytest.raises(SystemExit) as refused:
    main.main(["evaluate", f"--workdir={workdir}", "--checkpoint=best"])
  assert refused.value.code == (
      f"jformer evaluate: error: {workdir / 'best.json'} names step 6 as the best checkpoint, but "
      f"{workdir / 'checkpoints'} has no step 6 (the run was stopped before its save finished, or the folder was "
      "deleted); use --checkpoint=latest, or a step number that is there")


@pytest.mark.integration
def test_patience_ends_a_run_whose_metric_stops_improving(tiny_corpus, tmp_path, injected_bleu, capsys):
  workdir = tmp_path / "run"
  results = train_and_evaluate(tiny_run(tiny_corpus, **{"train.steps": 30, "train.patience": 2}), workdir)
  out = capsys.readouterr().out
  assert ("patience: no gain in valid_bleu over the last 2 evaluations (train.patience=2; best 5 at step 6): the run "
          "ends at step 12") in out
  assert results["step"] == 12 and results["stopped_by_patience"] and results["tested_step"] == 6
  assert json.loads((workdir / "results.json").read_text())["finished"]
  train_and_evaluate(tiny_run(tiny_corpus, **{"train.steps": 30, "train.patience": 2}), workdir)
  assert "holds a finished run: step 12" in capsys.readouterr().out  # run again: nothing to do.
  # More patience trains on: step 15 is a third evaluation without a gain.
  results = train_and_evaluate(tiny_run(tiny_corpus, **{"train.steps": 30, "train.patience": 3}), workdir)
  assert results["step"] == 15 and results["stopped_by_patience"] and "resumed from step 12" in capsys.readouterr().out


@pytest.mark.integration
def test_a_time_budget_counts_the_kept_metric_in_each_evaluation(tiny_corpus, tmp_path, monkeypatch):
  """A kept metric that takes 0.6 s (as decoding for valid BLEU takes time): the plan's seconds per evaluation hold
  it (the budget here is too small, so the plan is refused naming them)."""
  def slow_value(self, name, metrics, model, host_params):
    time.sleep(0.6)
    return metrics["loss"]

  monkeypatch.setattr(tasks.TranslationTask, "kept_value", slow_value)
  config = load_tiny(tiny_corpus, **{"train.keep_best": "valid_loss", "train.budget_minutes": 0.0001,
                                     "train.eval_every": 1000, "train.checkpoint_every": 1000})
  with pytest.raises(budget_lib.BudgetTooSmallError, match=r"s per step and (\d+\.\d)s per evaluation") as refused:
    train_and_evaluate(config, tmp_path)
  assert float(re.search(r"(\d+\.\d)s per evaluation", str(refused.value)).group(1)) >= 0.6
