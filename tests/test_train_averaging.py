"""Checkpoint averaging at the end of a run (jformer/train/averaging.py): the steps it saves and keeps, the mean it
takes, and the choice between the mean and the last step's parameters on the valid loss."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import LAYOUTS, SMALL, assert_same_params, load_tiny
from jformer import checkpoint
from jformer import config as config_lib
from jformer.train import averaging
from jformer.train.evaluation import evaluate_run
from jformer.train.loop import train_and_evaluate


def train_section(**values):
  """configs/small.py's train section with `values`, checked as any config is."""
  return config_lib.run_settings(config_lib.load(SMALL, {f"train.{key}": value for key, value in values.items()})).train


def test_window_spaces_the_checkpoints_evenly_over_the_last_span_ending_at_the_last_step():
  assert averaging.window(1000, 5, 0.1) == (900, 925, 950, 975, 1000)
  assert averaging.window(3105, 5, 0.05) == (2950, 2989, 3028, 3066, 3105)  # rounded to whole steps.
  assert averaging.window(12, 3, 0.5) == (6, 9, 12)
  assert averaging.window(10, 5, 0.1) == (9, 10)  # a span of one step holds two checkpoints, not five.
  assert averaging.window(4, 3, 0.99) == (1, 2, 4)  # never before step 1.


def test_averaged_steps_are_the_saved_steps_of_the_window_or_the_last_saved():
  spanned = train_section(average_checkpoints=3, average_span=0.5, steps=12)
  assert averaging.averaged_steps(spanned, 12, [3, 6, 9, 12]) == [6, 9, 12]
  assert averaging.averaged_steps(spanned, 12, [3, 9, 12]) == [9, 12]  # step 6 was never saved (a moved plan).
  last = train_section(average_checkpoints=3, steps=12)
  assert averaging.averaged_steps(last, 12, [3, 6, 9, 12]) == [6, 9, 12]
  assert averaging.averaged_steps(last, 12, [2, 4, 7, 8, 12]) == [7, 8, 12]


def state(step: int) -> dict:
  return {"params": {"w": jnp.full((3,), float(step)), "b": jnp.arange(2.0) * step}, "step": jnp.int32(step)}


@pytest.fixture
def saved(tmp_path):
  """A checkpoint directory written with max_to_keep=2 while steps 2 and 4 are kept: it holds 2, 4, 6 and 7."""
  directory = tmp_path / "checkpoints"
  with checkpoint.Checkpointer(directory, max_to_keep=2, save_interval_steps=1) as ckpt:
    ckpt.keep([2, 4])
    for step in range(1, 8):
      ckpt.save(step, state(step))
    ckpt.wait()
    assert ckpt.all_steps() == [2, 4, 6, 7]
    ckpt.keep([6])  # replaces the kept steps: 2 and 4 go at the next save (not among the newest 2).
    ckpt.save(8, state(8))
    ckpt.wait()
    assert ckpt.all_steps() == [6, 7, 8]
  return directory


def test_average_params_of_chosen_steps(saved):
  mean, steps = checkpoint.average_params(saved, steps=[8, 6])
  assert steps == [6, 8]
  np.testing.assert_allclose(mean["w"], np.full(3, 7.0))
  np.testing.assert_allclose(mean["b"], np.arange(2.0) * 7)
  with pytest.raises(ValueError, match=r"steps \[5, 6\] of .* which holds \[6, 7, 8\]: \[5\] missing"):
    checkpoint.average_params(saved, steps=[5, 6])


@pytest.mark.parametrize("final_loss, chosen", [(10.0, True), (7.0, True), (6.9, False)])
def test_choose_tests_the_mean_only_where_its_valid_loss_is_no_higher(saved, final_loss, chosen, capsys):
  workdir = saved.parent
  train = train_section(average_checkpoints=3, average_span=0.25, steps=8)
  final = {"w": np.full(3, 8.0), "b": np.arange(2.0) * 8}
  # A valid "loss" of the mean's own value: the mean of steps 6, 7 and 8 scores 7.
  params, results = averaging.choose(train, workdir, 8, final, final_loss, lambda p: {"loss": float(p["w"][0])})
  assert results["averaged_steps"] == [6, 7, 8] and results["averaged_eval_loss"] == pytest.approx(7.0)
  assert results["final_eval_loss"] == final_loss
  assert results["tested_params"] == ("averaged" if chosen else "final")
  np.testing.assert_allclose(params["w"], np.full(3, 7.0 if chosen else 8.0))
  assert checkpoint.averaged_dir(workdir).is_dir() == chosen
  if chosen:
    np.testing.assert_allclose(checkpoint.load_params(checkpoint.averaged_dir(workdir))["w"], np.full(3, 7.0))
  assert f"-> the final test uses {'the mean' if chosen else 'the last step'}" in capsys.readouterr().out


def test_config_refuses_a_span_without_checkpoints_to_average():
  with pytest.raises(ValueError, match=r"train.average_span=0.5 needs .* train.average_checkpoints >= 2 \(now 0\)"):
    train_section(average_span=0.5)
  with pytest.raises(ValueError, match=r"train.average_span=1.0 needs a fraction below 1"):
    train_section(average_span=1.0, average_checkpoints=3)
  with pytest.raises(ValueError, match=r"needs train.keep_checkpoints >= it \(now 2\), or train.average_span > 0"):
    train_section(average_checkpoints=3, keep_checkpoints=2)
  train_section(average_checkpoints=3, keep_checkpoints=1, average_span=0.5)


@pytest.mark.integration
@pytest.mark.parametrize("layout", ["one_device", "pmap8"])
def test_a_run_saves_keeps_averages_and_chooses_its_window(repo_root, tiny_corpus, tmp_path, layout, capsys):
  """12 steps, 3 checkpoints over the last half (steps 6, 9, 12) though only 1 is kept and checkpoint_every=100: the
  run saves and keeps them, scores their mean on the valid split and tests the better of mean and last step."""
  config = load_tiny(tiny_corpus, **LAYOUTS[layout], **{
      "train.steps": 12, "train.eval_every": 12, "train.checkpoint_every": 100, "train.keep_checkpoints": 1,
      "train.average_checkpoints": 3, "train.average_span": 0.5, "optimizer.warmup_steps": 4})
  workdir = tmp_path / "run"
  results = train_and_evaluate(config, workdir)
  with checkpoint.Checkpointer(checkpoint.checkpoints_dir(workdir), read_only=True) as ckpt:
    assert ckpt.all_steps() == [6, 9, 12]
    saved = [ckpt.restore_params(step) for step in (6, 9, 12)]
  stored = json.loads((workdir / "results.json").read_text())
  assert stored["averaged_steps"] == [6, 9, 12] and stored["final_eval_loss"] == stored["eval_loss"]
  chosen = stored["averaged_eval_loss"] <= stored["eval_loss"]
  assert stored["tested_params"] == ("averaged" if chosen else "final") and results["bleu"] == stored["bleu"]
  assert checkpoint.averaged_dir(workdir).is_dir() == chosen
  mean = jax.tree.map(lambda *x: sum(x) / 3, *saved)
  assert "checkpoint averaging: the mean of steps 6, 9, 12 has valid loss" in capsys.readouterr().out
  if chosen:  # the mean written is the mean of the three, and `jformer evaluate` scores it as the run did.
    assert_same_params(checkpoint.load_params(checkpoint.averaged_dir(workdir)), mean, atol=1e-6)
    evaluated, _ = evaluate_run(workdir, which="averaged")
    assert evaluated["loss"] == pytest.approx(stored["averaged_eval_loss"], rel=1e-5)
