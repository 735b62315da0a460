"""Safe to run twice: a finished run run again changes nothing; a run stopped during its final test runs only that
test again; results of every phase are merged, never replaced by empty values; the vocabulary and config.json a
run depends on are checked against checksums recorded with them."""

import json

import pytest
from helpers import REPO, tiny_overrides

from jformer import config as config_lib
from jformer import main, tasks
from jformer.train import loop

pytestmark = pytest.mark.integration


def train_args(workdir, corpus, **extra) -> list[str]:
  return ["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={workdir}",
          *[f"--config.{key}={value}" for key, value in tiny_overrides(corpus, **extra).items()]]


def test_a_finished_run_run_again_changes_nothing_and_more_steps_continue_it(tiny_corpus, tmp_path, capsys):
  workdir = tmp_path / "run"
  main.main(train_args(workdir, tiny_corpus))
  written = {name: (workdir / name).read_bytes() for name in ("results.json", "config.json")}
  first = json.loads(written["results.json"])
  assert first["finished"] and first["step"] == 6 and "eval_loss" in first and "bleu" in first
  capsys.readouterr()

  main.main(train_args(workdir, tiny_corpus))  # the same command again
  out = capsys.readouterr().out
  assert out.strip().splitlines() == [
      f"{workdir} holds a finished run: step 6, BLEU {first['bleu']:.2f} ({workdir / 'results.json'}); nothing to "
      "do (to train on, raise train.steps or train.budget_minutes)"]
  assert {name: (workdir / name).read_bytes() for name in written} == written

  main.main(train_args(workdir, tiny_corpus, **{"train.steps": 9}))  # asks for more: trains on.
  more = json.loads((workdir / "results.json").read_text())
  assert more["finished"] and more["step"] == 9 and more["eval_loss"] != first["eval_loss"]
  assert more["tokens_per_second"] > 0 and "step_temp_mib" in more and "bleu" in more


class Killed(Exception):
  """Stands for the process dying in the middle of its final test."""


def test_a_run_stopped_during_its_final_test_runs_only_the_test_again(tiny_corpus, tmp_path, monkeypatch, capsys):
  workdir = tmp_path / "run"
  config = config_lib.load(REPO / "configs" / "small.py", tiny_overrides(tiny_corpus))

  def killed(*args, **kwargs):
    raise Killed()

  with monkeypatch.context() as patch:
    patch.setattr(tasks.TranslationTask, "final_results", killed)
    with pytest.raises(Killed):
      loop.train_and_evaluate(config, workdir)
  trained = json.loads((workdir / "results.json").read_text())
  assert not trained["finished"] and trained["step"] == 6 and "bleu" not in trained
  assert trained["eval_loss"] > 0 and trained["tokens_per_second"] > 0 and trained["step_temp_mib"] > 0
  capsys.readouterr()

  results = loop.train_and_evaluate(config, workdir)
  out = capsys.readouterr().out
  assert "eval step" not in out and "resumed from step 6" in out  # no step trained, no evaluation: only the test.
  assert results["finished"] and "bleu" in results
  for key in ("eval_loss", "eval_accuracy", "train_loss", "tokens_per_second", "train_seconds", "step_temp_mib"):
    assert results[key] == trained[key], key  # the training's results are kept, not replaced or zeroed.
  assert json.loads((workdir / "results.json").read_text()) == results


def test_a_changed_vocabulary_or_config_is_one_line_naming_the_file(tiny_corpus, tmp_path, capsys):
  workdir = tmp_path / "run"
  main.main(train_args(workdir, tiny_corpus, **{"train.steps": 2}))
  vocab = workdir / "vocab" / "spm_300.model"
  original = vocab.read_bytes()
  edited = bytearray(original)
  edited[100] ^= 1  # the same size, one bit changed: SentencePiece would load it and tokenize differently.
  vocab.write_bytes(bytes(edited))
  for argv in (train_args(workdir, tiny_corpus, **{"train.steps": 4}), ["evaluate", f"--workdir={workdir}"]):
    with pytest.raises(SystemExit) as stop:
      main.main(argv)
    assert str(stop.value.code).endswith("the parameters were trained on the recorded one, so restore that file (or "
                                         "train in a new --workdir)")
    assert f"the run's vocabulary {vocab} changed since it was recorded (same size, other bytes" in stop.value.code
  vocab.write_bytes(original[:1000])  # truncated
  with pytest.raises(SystemExit) as stop:
    main.main(["evaluate", f"--workdir={workdir}"])
  assert "(truncated or extended: 1,000 bytes" in stop.value.code and "\n" not in stop.value.code
  vocab.write_bytes(original)

  settings = workdir / "config.json"
  settings.write_text(settings.read_text().replace('"beam_size": 4', '"beam_size": 5'))
  with pytest.raises(SystemExit) as stop:
    main.main(["evaluate", f"--workdir={workdir}"])
  assert stop.value.code.startswith(f"jformer evaluate: error: the run's config {settings} changed since it was "
                                    "recorded (same size, other bytes")
  assert stop.value.code.endswith(f"or delete {workdir / 'config_checksum.json'} to accept the edit")
