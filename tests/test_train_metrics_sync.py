"""No host round trip per step: the train step's metrics are summed on device (`add_to_totals`) and the loop reads
them only every `train.log_every` steps and before evaluations and checkpoints."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.array import ArrayImpl

from helpers import tiny_overrides
from jformer import config as config_lib
from jformer.train import loop
from jformer.train.step import FINITE_CHECKS, add_to_totals, averages, new_totals


def step_metrics(step, loss, tokens, finite=(True, True, True), skipped_updates=0, bad_leaf=-1):
  return {"loss": jnp.float32(loss), "accuracy": jnp.float32(0.5), "z_loss": jnp.float32(0.25),
          "tokens": jnp.float32(tokens),
          "grad_norm": jnp.float32(2.0 * step), "learning_rate": jnp.float32(1e-3 * step),
          "finite": jnp.asarray(finite), "bad_leaf": jnp.int32(bad_leaf), "skipped_updates": jnp.int32(skipped_updates),
          "step": jnp.int32(step)}


def test_totals_weight_the_loss_by_tokens_and_record_the_first_bad_step_and_the_first_beyond_the_allowance():
  totals = new_totals()
  assert int(totals["first_bad_step"]) == int(totals["stop_step"]) == -1
  add = jax.jit(lambda totals, metrics: add_to_totals(totals, metrics, allowed_skips=1))
  totals = add(totals, step_metrics(11, loss=2.0, tokens=10))
  totals = add(totals, step_metrics(12, loss=np.nan, tokens=30, finite=(False, False, True), skipped_updates=1,
                                    bad_leaf=4))
  totals = add(totals, step_metrics(13, loss=4.0, tokens=30, finite=(True, False, False), skipped_updates=2,
                                    bad_leaf=7))
  totals = add(totals, step_metrics(14, loss=5.0, tokens=30, finite=(True, True, False), skipped_updates=3))
  read = jax.device_get(totals)
  assert read["steps"] == 4 and read["skipped"] == 3 and read["skipped_updates"] == 3 and read["tokens"] == 100
  assert read["first_bad_step"] == 12 and read["first_bad_finite"].tolist() == [False, False, True]
  assert read["stop_step"] == 13 and read["stop_finite"].tolist() == [True, False, False]  # 2 skips > 1 allowed.
  assert read["first_bad_leaf"] == 4 and read["stop_leaf"] == 7
  assert len(read["stop_finite"]) == len(FINITE_CHECKS)
  clean = jax.device_get(add(add(new_totals(), step_metrics(1, 2.0, 10)), step_metrics(2, 4.0, 30)))
  assert clean["first_bad_step"] == clean["stop_step"] == clean["stop_leaf"] == -1
  means = averages(clean)
  assert means["loss"] == pytest.approx((2.0 * 10 + 4.0 * 30) / 40)  # per target token, not per step.
  assert means["accuracy"] == pytest.approx(0.5) and means["grad_norm"] == pytest.approx(3.0)
  assert means["z_loss"] == pytest.approx(0.25)
  assert means["learning_rate"] == pytest.approx(2e-3)  # the latest.


@pytest.mark.integration
def test_the_step_loop_reads_the_device_only_at_log_eval_and_checkpoint_steps(repo_root, tiny_corpus, tmp_path,
                                                                             monkeypatch):
  """Counts every host read of a device array in the main thread, by the number of steps trained when it happens.

  Every host read of a jax.Array (float(), int(), bool(), .item(), .tolist(), printing, np.asarray, jax.device_get)
  goes through `ArrayImpl._value`, except NumPy's buffer protocol, which exists only for single-device arrays: on
  the mesh runner's 8 devices every array the loop holds (state, metrics, totals) spans all 8, as checked below.
  """
  trained, reads = [0], []
  value = ArrayImpl._value

  def counted(self):
    if threading.current_thread() is threading.main_thread():  # Orbax writes in its own threads.
      reads.append(trained[0])
    return value.fget(self)

  make_runner = loop.make_runner

  def counting_runner(*args, **kwargs):
    runner = make_runner(*args, **kwargs)
    train_step, add = runner.train_step, runner.add_to_totals

    def step(state, batch):
      trained[0] += 1
      return train_step(state, batch)

    def add_to_totals(totals, metrics):
      totals = add(totals, metrics)
      for leaf in jax.tree.leaves((metrics, totals)):
        assert len(leaf.sharding.device_set) == 8
      return totals

    runner.train_step, runner.add_to_totals = step, add_to_totals
    return runner

  monkeypatch.setattr(loop, "make_runner", counting_runner)
  monkeypatch.setattr(ArrayImpl, "_value", property(counted))
  config = config_lib.load(repo_root / "configs" / "small.py", tiny_overrides(tiny_corpus, **{
      "train.steps": 12, "train.log_every": 4, "train.checkpoint_every": 6, "train.eval_every": 12}))
  results = loop.train_and_evaluate(config, str(tmp_path))
  assert trained[0] == 12 and results["step"] == 12 and np.isfinite(results["train_loss"])
  assert sorted(set(reads)) == [0, 4, 6, 8, 12]  # before training, every 4 steps, the checkpoint at 6, the end.
