"""Non-finite updates (issue #13): the step never applies one; the run skips up to
`train.skip_nonfinite_updates` of them, then stops naming the step and a last good checkpoint that is finite.
The loop reads the step's records only every `train.log_every` steps and before saves: the step it names is still
the first one beyond the allowance."""

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import tiny_overrides
from jformer import checkpoint, tasks
from jformer import config as config_lib
from jformer.train import optim
from jformer.train.loop import NonFiniteUpdateError, check_resume, train_and_evaluate
from jformer.train.state import init_train_state
from jformer.train.step import make_train_step, parameter_names

# Adam at 1e9 times the paper's learning rate: the loss stays finite for a few steps, then the gradients overflow.
DIVERGING = {"optimizer.learning_rate_scale": 1e9}


def all_finite(tree) -> bool:
  return all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree.leaves(tree))


def checkpointed_params(workdir) -> dict:
  """{step: params} of every checkpoint in the run's workdir."""
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True) as ckpt:
    return {step: ckpt.restore_params(step) for step in ckpt.all_steps()}


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_step_keeps_the_state_when_the_gradients_are_not_finite(repo_root):
  config = config_lib.load(repo_root / "configs" / "small.py", {
      "model.vocab_size": 40, "model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64,
      "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, "model.max_length": 32, "data.max_length": 32,
      "optimizer.warmup_steps": 10, **DIVERGING})
  model = tasks.build_model(config)
  tx, schedule = optim.build_optimizer(config.optimizer, config.model.d_model)
  batch = {k: jnp.asarray(np.random.default_rng(0).integers(1, 40, (4, 12)), jnp.int32) for k in ("inputs", "targets")}
  state = init_train_state(model, tx, jax.random.PRNGKey(0), batch)
  step = jax.jit(make_train_step(model, tx, schedule, label_smoothing=0.1))
  for _ in range(10):
    new_state, metrics = step(state, batch)
    if not metrics["finite"][1]:
      break
    assert metrics["finite"].all() and int(metrics["skipped_updates"]) == 0
    state = new_state
  assert not metrics["finite"][1], "the gradients never overflowed"
  names = parameter_names(state.params)  # one path per parameter, in the gradients' leaf order.
  assert len(names) == len(jax.tree.leaves(state.params)) and all("/" in name for name in names)
  assert 0 <= int(metrics["bad_leaf"]) < len(names)  # the first parameter whose gradient is not finite.
  assert int(new_state.step) == int(state.step) + 1
  assert int(new_state.skipped_updates) == int(metrics["skipped_updates"]) == 1
  for new, old in zip(jax.tree.leaves((new_state.params, new_state.opt_state)),
                      jax.tree.leaves((state.params, state.opt_state)), strict=True):
    np.testing.assert_array_equal(new, old)
  assert all_finite(new_state.params) and all_finite(new_state.opt_state)


def train_command(workdir, corpus, **extra):
  overrides = [f"--config.{k}={v}" for k, v in tiny_overrides(corpus, **extra).items()]
  return [sys.executable, "-m", "jformer.main", "train", "--config=configs/small.py", f"--workdir={workdir}",
          *overrides]


@pytest.mark.integration
def test_a_non_finite_update_stops_the_run_in_one_line_and_no_checkpoint_holds_it(repo_root, tiny_corpus, tmp_path):
  result = subprocess.run(train_command(tmp_path, tiny_corpus, **DIVERGING, **{"train.checkpoint_every": 1}),
                          cwd=repo_root, capture_output=True, text=True, timeout=600)
  assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("jformer train: error:")]
  assert len(errors) == 1, result.stderr[-3000:]
  match = re.fullmatch(r"jformer train: error: step (\d+): non-finite (.+); stopping "
                       r"\(train\.skip_nonfinite_updates=0\)\. The last good checkpoint is step (\d+) in (.+)\.",
                       errors[0])
  assert match, errors[0]
  bad_step, what, last_good, directory = int(match[1]), match[2], int(match[3]), match[4]
  assert "gradients (the first: " in what and directory == str(tmp_path / "checkpoints")  # names the parameter.
  saved = checkpointed_params(tmp_path)
  assert max(saved) == last_good == bad_step - 1  # the failing step was not saved...
  assert all(all_finite(params) for params in saved.values())  # ...and every checkpoint is finite.


@pytest.mark.integration
def test_skipped_updates_are_logged_counted_and_carried_over_a_resume(repo_root, tiny_corpus, tmp_path, capsys):
  def load(**extra):  # pmap here, the mesh runner in the test above: both run the same guarded step.
    return config_lib.load(repo_root / "configs" / "small.py",
                           tiny_overrides(tiny_corpus, **DIVERGING, **{"parallel.mode": "pmap", **extra}))

  results = train_and_evaluate(load(**{"train.skip_nonfinite_updates": 10}), str(tmp_path))
  reports = re.findall(r"^steps (\d+)-(\d+): (\d+) non-finite updates? skipped, the first at step (\d+) "
                       r"\(non-finite (.+)\); (\d+) of 10 allowed$", capsys.readouterr().out, re.M)
  assert reports
  skipped = 0
  for first, last, count, first_bad, _, total in reports:  # one line per read (log_every=2, eval/save every 3).
    first, last, count, first_bad, total = map(int, (first, last, count, first_bad, total))
    assert 1 <= count <= last - first + 1 and first <= first_bad <= last
    skipped += count
    assert total == skipped
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["step"] == 6 and saved["skipped_updates"] == results["skipped_updates"] == skipped
  assert all(all_finite(params) for params in checkpointed_params(tmp_path).values())

  # Resumed with no skips left, the next non-finite step stops the run: the count came from the checkpoint.
  with pytest.raises(NonFiniteUpdateError, match=rf"^step [78]: non-finite .+; stopping after {skipped} skipped "
                     rf"updates \(train\.skip_nonfinite_updates={skipped}\)\. The last good checkpoint is step 6 "):
    train_and_evaluate(load(**{"train.steps": 8, "train.skip_nonfinite_updates": skipped}), str(tmp_path))


@pytest.mark.integration
def test_the_stop_names_the_first_bad_step_though_the_metrics_are_read_later(repo_root, tiny_corpus, tmp_path):
  def stopped_at(workdir, **extra) -> tuple[int, str]:
    config = config_lib.load(repo_root / "configs" / "small.py", tiny_overrides(tiny_corpus, **DIVERGING, **extra))
    with pytest.raises(NonFiniteUpdateError) as error:
      train_and_evaluate(config, str(workdir))
    match = re.fullmatch(r"step (\d+): non-finite (.+); stopping \(train\.skip_nonfinite_updates=0\)\. (.+)",
                         str(error.value))
    return int(match[1]), match[2], match[3]

  every_step = stopped_at(tmp_path / "every", **{"train.log_every": 1, "train.checkpoint_every": 1000})
  late = stopped_at(tmp_path / "late", **{"train.log_every": 6, "train.checkpoint_every": 1000,
                                          "train.eval_every": 1000})
  assert every_step[0] % 6 and every_step[0] < 6  # read at step 6, several steps after the bad one...
  assert late == every_step  # ...it names the same step, the same checks, and that nothing was saved.
  assert late[2] == ("No checkpoint was saved before it, so the workdir holds no run: train again with the fix (any "
                     "config) in it.") and not list((tmp_path / "late" / "checkpoints").iterdir())
  # Nothing saved, no identity recorded (issue 49): the fix may change a key that defines the run.
  assert not (tmp_path / "late" / "config.json").exists()
  check_resume(config_lib.run_settings(config_lib.load(repo_root / "configs" / "small.py", tiny_overrides(
      tiny_corpus, **{"model.attention": "chunked", "model.d_model": 64}))), tmp_path / "late")
