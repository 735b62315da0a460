"""`jformer evaluate` on a trained translation run: the split's scores, another context length, refused keys."""

import json
import subprocess
import sys

import pytest

from helpers import REPO, tiny_overrides
from jformer import config as config_lib
from jformer import main
from jformer.train.loop import train_and_evaluate

pytestmark = pytest.mark.integration  # a trained run, and `jformer evaluate` as a command.


@pytest.fixture(scope="module")
def translation_run(tiny_corpus, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("translation_run")
  results = train_and_evaluate(config_lib.load(REPO / "configs" / "small.py", tiny_overrides(tiny_corpus)),
                               str(workdir))
  return workdir, results


def evaluate(*args, cwd):
  return subprocess.run([sys.executable, "-m", "jformer.main", "evaluate", *args], cwd=cwd, capture_output=True,
                        text=True, timeout=300)


def test_evaluate_a_translation_run(translation_run, capsys, caplog):
  workdir, trained = translation_run
  main.main(["evaluate", f"--workdir={workdir}"])
  assert "corrupt" not in caplog.text  # a valid newest checkpoint is restored without a warning.
  out = capsys.readouterr().out.strip().splitlines()
  written = json.loads((workdir / "evaluate_valid_32.json").read_text())
  # The valid split with the final parameters, as the run's last evaluation scored it.
  assert written["loss"] == pytest.approx(trained["eval_loss"], rel=1e-5)
  assert written["accuracy"] == pytest.approx(trained["eval_accuracy"], rel=1e-5)
  assert written["split"] == "valid" and written["max_length"] == 32 and written["checkpoint"] == "auto"
  assert written["bleu_examples"] == 24 and 0 <= written["bleu"] <= 100
  assert out[0].startswith("BLEU ") and " on 24 valid sentences (greedy on " in out[0]
  assert out[-1].startswith("valid at 32 tokens (auto checkpoint): loss ") and f"bleu {written['bleu']:.4f}" in out[-1]
  assert out[-1].endswith(f"written to {workdir / 'evaluate_valid_32.json'}")


def test_evaluate_another_length_and_split_as_a_command(translation_run, repo_root):
  workdir, trained = translation_run
  result = evaluate(f"--workdir={workdir}", "--split=test", "--checkpoint=latest", "--config.data.max_length=48",
                    cwd=repo_root)
  assert result.returncode == 0, result.stderr
  written = json.loads((workdir / "evaluate_test_48.json").read_text())
  assert written["max_length"] == 48 and written["split"] == "test"
  assert written["bleu"] == pytest.approx(trained["bleu"])  # same decode settings, same test split.
  assert written["perplexity"] == pytest.approx(2.718281828 ** written["loss"], rel=1e-6)
  assert json.loads((workdir / "config.json").read_text())["data"]["max_length"] == 32  # the run is untouched.


def test_evaluate_refuses_other_run_keys_and_bad_workdirs(translation_run, tmp_path, repo_root):
  workdir, _ = translation_run
  with pytest.raises(SystemExit) as stop:
    main.main(["evaluate", f"--workdir={workdir}", "--config.data.max_length=48", "--config.model.d_model=64"])
  assert stop.value.code == (f"jformer evaluate: error: the run in {workdir} was trained with other values of keys "
                             "that define its parameters, vocabulary or data: model.d_model=64 (the run has 32); "
                             "drop those --config overrides")
  with pytest.raises(SystemExit, match=r"data.max_length=128 exceeds model.max_length=64"):
    main.main(["evaluate", f"--workdir={workdir}", "--config.data.max_length=128"])
  result = evaluate(f"--workdir={tmp_path / 'nothing'}", cwd=repo_root)
  assert result.returncode == 1
  assert result.stderr == (f"jformer evaluate: error: {tmp_path / 'nothing' / 'config.json'} does not exist: is "
                           f"'{tmp_path / 'nothing'}' the --workdir of a `jformer train` run?\n")
  untrained = tmp_path / "untrained"
  untrained.mkdir()
  (untrained / "config.json").write_text((workdir / "config.json").read_text())
  with pytest.raises(SystemExit, match=rf"jformer evaluate: error: no checkpoints in {untrained / 'checkpoints'}; "):
    main.main(["evaluate", f"--workdir={untrained}"])
  assert evaluate(f"--workdir={workdir}", "--split=train", cwd=repo_root).returncode == 2
