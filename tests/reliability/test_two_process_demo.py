"""configs/demo.py as shipped (`model.dtype="auto"`, dropout, cool-down), shrunk by overrides only, as 2 processes
from the CLI: SIGTERM to one, both save the same step, and the restart resumes there and finishes.

Resolving `auto` asks JAX for its backend; before `jax.distributed` was initialized that started the backend in
every process, which then died with "jax.distributed.initialize() must be called before any JAX calls". The
model, batch and steps are shrunk (`helpers.tiny_overrides`); `model.dtype` is left as the demo sets it.
"""

import json

import pytest
from helpers import finish, prepared_overrides, sigterm_process_1_at_step, start_two_processes

from jformer import checkpoint

pytestmark = pytest.mark.slow


def test_two_processes_of_the_demo_save_the_same_step_on_sigterm_and_the_restart_finishes(repo_root, tiny_corpus,
                                                                                          tmp_path):
  overrides = prepared_overrides(repo_root, tiny_corpus, tmp_path, **{
      "train.budget_minutes": 0, "train.steps": 60, "train.log_every": 1, "train.eval_every": 1000,
      "train.checkpoint_every": 1000, "train.bleu_examples": 4})
  assert not any(override.startswith("--config.model.dtype=") for override in overrides)  # the demo's "auto".
  workdir = tmp_path / "run"

  processes = start_two_processes(repo_root, workdir, overrides, config="configs/demo.py")
  chief, other = sigterm_process_1_at_step(processes, 10)
  assert "step     10/60" in chief, chief[-3000:]
  saved = int(chief.split("preempted: saved step ")[1].split()[0])
  assert 10 <= saved < 60, chief[-3000:]
  assert sorted(p.name for p in (workdir / "checkpoints" / str(saved) / "data").glob("process_*.json")) == [
      "process_0-of-2.json", "process_1-of-2.json"]  # both processes' data positions, in the one step.
  with checkpoint.Checkpointer(workdir / "checkpoints", read_only=True) as ckpt:
    assert ckpt.all_steps() == [saved]
  assert "SIGTERM received" in other and "Traceback" not in other
  assert json.loads((workdir / "config.json").read_text())["model"]["dtype"] == "auto"

  resumed = finish(start_two_processes(repo_root, workdir, overrides, config="configs/demo.py"))[0]
  assert f"resumed from step {saved}" in resumed and "step     60/60" in resumed, resumed[-3000:]
  results = json.loads((workdir / "results.json").read_text())
  assert results["finished"] and results["step"] == 60, results
  with checkpoint.Checkpointer(workdir / "checkpoints", read_only=True) as ckpt:
    assert ckpt.latest_step() == 60
