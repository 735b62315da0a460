"""train_and_evaluate end to end on a tiny corpus: results, exact resume, translate, averaging (non-finite updates:
test_nonfinite.py)."""

import json
import os
import signal
import subprocess
import sys

import pytest

from helpers import assert_same_params, final_params, tiny_overrides
from jformer import checkpoint
from jformer import config as config_lib
from jformer import main
from jformer.train.loop import train_and_evaluate

pytestmark = pytest.mark.integration  # every test trains.


def load(repo_root, corpus, **extra):
  return config_lib.load(repo_root / "configs" / "small.py", tiny_overrides(corpus, **extra))


def test_train_writes_results_and_resume_is_exact(repo_root, tiny_corpus, tmp_path, capsys):
  straight = tmp_path / "straight"
  results = train_and_evaluate(load(repo_root, tiny_corpus), str(straight))
  out = capsys.readouterr().out
  assert "steps/s" in out and "ETA" in out and "BLEU" in out
  saved = json.loads((straight / "results.json").read_text())
  for key in ("step", "train_loss", "eval_loss", "eval_accuracy", "bleu", "sacrebleu_signature",
              "tokens_per_second", "step_temp_mib"):
    assert key in saved, key
  assert saved["step_temp_mib"] > 0 and "MiB of temporary memory per device" in out
  assert saved["step"] == 6 and saved["sacrebleu_signature"].startswith("nrefs:1|case:mixed")
  assert results["bleu"] == saved["bleu"]
  assert json.loads((straight / "config.json").read_text())["model"]["d_model"] == 32
  assert (straight / "vocab" / "spm_300.model").exists() and list((straight / "tensorboard").iterdir())

  resumed = tmp_path / "resumed"
  train_and_evaluate(load(repo_root, tiny_corpus, **{"train.steps": 3}), str(resumed))
  vocab_mtime = (resumed / "vocab" / "spm_300.model").stat().st_mtime_ns
  train_and_evaluate(load(repo_root, tiny_corpus), str(resumed))
  assert "resumed from step 3" in capsys.readouterr().out
  assert (resumed / "vocab" / "spm_300.model").stat().st_mtime_ns == vocab_mtime  # vocabulary reused.
  step_a, params_a = final_params(straight)
  step_b, params_b = final_params(resumed)
  assert step_a == step_b == 6
  assert_same_params(params_a, params_b, atol=1e-6)
  assert json.loads((resumed / "results.json").read_text())["train_loss"] == pytest.approx(saved["train_loss"],
                                                                                           abs=1e-6)

  # The trained run translates: an empty line stays empty, an over-long line is handled.
  source = tmp_path / "source.txt"
  source.write_text("Save the file before closing.\n\n" + "word " * 300 + "\n")
  target = tmp_path / "target.txt"
  main.main(["translate", f"--workdir={straight}", f"--input={source}", f"--output={target}"])
  lines = target.read_text().split("\n")
  assert len(lines) == 4 and lines[1] == "" and lines[3] == ""

  # Averaging the last 2 checkpoints (steps 3 and 6) gives their mean, usable by translate.
  main.main(["average-checkpoints", f"--workdir={straight}", "--last=2"])
  with checkpoint.Checkpointer(os.path.join(straight, "checkpoints"), read_only=True) as ckpt:
    three, six = ckpt.restore_params(3), ckpt.restore_params(6)
  import jax

  assert_same_params(checkpoint.load_params(straight / "averaged"),
                     jax.tree.map(lambda a, b: (a + b) / 2, three, six), atol=1e-6)
  main.main(["translate", f"--workdir={straight}", f"--input={source}", f"--output={target}",
             "--checkpoint=averaged"])


def test_resume_refuses_another_model(repo_root, tiny_corpus, tmp_path):
  train_and_evaluate(load(repo_root, tiny_corpus, **{"train.steps": 1}), str(tmp_path))
  with pytest.raises(ValueError, match=r"model.d_ff=128 \(the run has 64\)"):
    train_and_evaluate(load(repo_root, tiny_corpus, **{"model.d_ff": 128}), str(tmp_path))


@pytest.mark.slow
def test_sigterm_saves_and_the_rerun_ends_like_an_uninterrupted_run(repo_root, tiny_corpus, tmp_path):
  overrides = [f"--config.{k}={v}" for k, v in tiny_overrides(
      tiny_corpus, **{"train.steps": 150, "train.log_every": 1, "train.eval_every": 150,
                      "train.checkpoint_every": 1000, "data.max_length": 64, "model.d_model": 64}).items()]
  command = [sys.executable, "-m", "jformer.main", "train", "--config=configs/small.py"]
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  straight = subprocess.run(command + [f"--workdir={tmp_path / 'a'}"] + overrides, cwd=repo_root, env=env,
                            capture_output=True, text=True, timeout=900)
  assert straight.returncode == 0, straight.stderr[-2000:]
  process = subprocess.Popen(command + [f"--workdir={tmp_path / 'b'}"] + overrides, cwd=repo_root, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  seen = []
  for line in process.stdout:  # wait until training is under way, then preempt.
    seen.append(line)
    if line.startswith("step     30/"):
      process.send_signal(signal.SIGTERM)
      break
  rest, _ = process.communicate(timeout=300)
  assert process.returncode == 0, "".join(seen) + rest
  saved_step = int(rest.split("preempted: saved step ")[1].split()[0])
  assert 30 <= saved_step < 150
  rerun = subprocess.run(command + [f"--workdir={tmp_path / 'b'}"] + overrides, cwd=repo_root, env=env,
                         capture_output=True, text=True, timeout=900)
  assert rerun.returncode == 0, rerun.stderr[-2000:]
  assert f"resumed from step {saved_step}" in rerun.stdout
  final = lambda out: [l for l in out.splitlines() if l.startswith("step    150/150")][0].split("|")[1]
  assert final(rerun.stdout) == final(straight.stdout)  # same final loss, to the printed 4 decimals.
  assert_same_params(final_params(tmp_path / "a")[1], final_params(tmp_path / "b")[1], atol=1e-6)
