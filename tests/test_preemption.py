"""SIGTERM: a clean exit before training (nothing to save), and two processes that agree on the step they save and
resume like an uninterrupted run (jformer.train.preemption)."""

import os
import re
import signal

import jax
import numpy as np
import pytest

from helpers import finish, prepared_overrides, sigterm_process_1_at_step, start_two_processes, tiny_overrides
from jformer import checkpoint, data
from jformer import config as config_lib
from jformer.train import loop

pytestmark = pytest.mark.integration  # runs stopped by SIGTERM, in this process and in two `jformer train`.


def load(repo_root, corpus, **extra):
  return config_lib.load(repo_root / "configs" / "small.py", tiny_overrides(corpus, **extra))


def test_sigterm_during_data_preparation_exits_before_training_and_saves_nothing(repo_root, tiny_corpus, tmp_path,
                                                                                 monkeypatch, capsys):
  config = load(repo_root, tiny_corpus)
  prepare = data.prepare

  def preempted_while_preparing(*args):
    os.kill(os.getpid(), signal.SIGTERM)  # arrives while the data is prepared...
    return prepare(*args)  # ...which finishes; then the run stops before reading the data.

  monkeypatch.setattr(data, "prepare", preempted_while_preparing)
  monkeypatch.setattr(data, "make_datasets", lambda **kwargs: pytest.fail("the data was read after SIGTERM"))
  monkeypatch.setattr(loop.tasks, "build_model", lambda *a, **k: pytest.fail("the model was built after SIGTERM"))
  handler = signal.getsignal(signal.SIGTERM)
  assert loop.train_and_evaluate(config, str(tmp_path)) == {"preempted": True}
  assert ("preempted during the data preparation: no step was trained since the last checkpoint, so none was saved; "
          "rerun the same command to resume") in capsys.readouterr().out
  assert not (tmp_path / "checkpoints").exists()
  assert signal.getsignal(signal.SIGTERM) is handler  # the run's handler is gone.


def final_loss(output: str) -> str:
  return [line for line in output.splitlines() if line.startswith("step     60/60")][0].split("|")[1]


@pytest.mark.slow
def test_two_processes_save_the_same_step_when_one_gets_sigterm_and_resume_like_an_uninterrupted_run(
    repo_root, tiny_corpus, tmp_path):
  overrides = prepared_overrides(repo_root, tiny_corpus, tmp_path, **{
      "train.steps": 60, "train.log_every": 1, "train.eval_every": 1000, "train.checkpoint_every": 1000,
      "train.bleu_examples": 4})

  straight = finish(start_two_processes(repo_root, tmp_path / "straight", overrides))[0]

  processes = start_two_processes(repo_root, tmp_path / "preempted", overrides)
  chief, other = sigterm_process_1_at_step(processes, 10)
  saved = int(chief.split("preempted: saved step ")[1].split()[0])
  assert 10 <= saved < 60, chief[-3000:]
  step_dir = tmp_path / "preempted" / "checkpoints" / str(saved)
  assert sorted(p.name for p in (step_dir / "data").glob("process_*.json")) == ["process_0-of-2.json",
                                                                               "process_1-of-2.json"]
  with checkpoint.Checkpointer(tmp_path / "preempted" / "checkpoints", read_only=True) as ckpt:
    assert ckpt.all_steps() == [saved]  # both processes saved this one step, and nothing else.
  assert "SIGTERM received" in other and "Traceback" not in other

  resumed = finish(start_two_processes(repo_root, tmp_path / "preempted", overrides))[0]
  assert f"resumed from step {saved}" in resumed
  assert final_loss(resumed) == final_loss(straight)  # to the printed 4 decimals.
  params = []
  for run in ("straight", "preempted"):
    with checkpoint.Checkpointer(tmp_path / run / "checkpoints", read_only=True) as ckpt:
      params.append(ckpt.restore_params(60))
  for a, b in zip(jax.tree.leaves(params[0]), jax.tree.leaves(params[1]), strict=True):
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_two_processes_both_stop_before_training_when_one_gets_sigterm_while_preparing(repo_root, tiny_corpus,
                                                                                       tmp_path):
  processes = start_two_processes(repo_root, tmp_path / "run", prepared_overrides(repo_root, tiny_corpus, tmp_path))
  seen = []
  for line in processes[0].stdout:
    seen.append(line)
    if line.startswith("data: "):  # process 0 has its data; process 1 is preparing it or building the model.
      processes[1].send_signal(signal.SIGTERM)
      break
  rest, other = finish(processes, timeout=300)
  chief = "".join(seen) + rest
  assert re.search(r"^preempted (during the data preparation|while reading the data|during initialisation and restore): no step was trained", chief,
                   re.M), chief[-3000:]
  assert "SIGTERM received" in other and "train step:" not in chief  # the step was never compiled...
  assert not list((tmp_path / "run" / "checkpoints").glob("*"))  # ...nor anything saved.
