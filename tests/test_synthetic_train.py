"""MQAR end to end (configs/mqar.py, shrunk): answer accuracy rises well above chance, an interrupted run resumes to
the same parameters, and the answer metrics reach results.json, TensorBoard and `jformer evaluate`. Both runs are
in this process (the test process compiles with other XLA flags than a `jformer train` subprocess)."""

import json

import pytest
from helpers import REPO, assert_same_params, final_params

from jformer import config as config_lib
from jformer import main
from jformer.train.loop import train_and_evaluate

pytestmark = pytest.mark.integration  # trained runs.

VOCAB = 16  # task tokens: keys 1..7, values 8..15; chance accuracy 1/16 (1/8 knowing an answer is a value).


def mqar_config(**extra):
  overrides = {"data.dataset_options": dict(vocab_size=VOCAB, seq_len=32, num_kv_pairs=4, eval_examples=200),
               "model.vocab_size": 3 + VOCAB, "data.max_length": 32, "model.max_length": 32, "model.d_model": 32,
               "model.d_ff": 64, "data.batch_size": 32, "data.eval_batch_size": 40, "optimizer.warmup_steps": 20,
               "train.steps": 64, "train.log_every": 16, "train.eval_every": 32, "train.checkpoint_every": 32}
  overrides.update(extra)
  return config_lib.load(REPO / "configs" / "mqar.py", overrides)


def test_mqar_learns_and_resumes_exactly(tmp_path, capsys):
  whole, resumed = tmp_path / "whole", tmp_path / "resumed"
  results = train_and_evaluate(mqar_config(), str(whole))
  assert results["test_accuracy"] > 3 / VOCAB, results  # well above chance.
  saved = json.loads((whole / "results.json").read_text())
  for key in ("eval_accuracy", "eval_exact_match", "test_accuracy", "test_exact_match", "test_loss"):
    assert key in saved, key
  assert 0 <= saved["test_exact_match"] <= saved["test_accuracy"] <= 1
  assert not (whole / "vocab").exists() and not (whole / "tfds").exists()  # generated: nothing prepared.
  events = b"".join(path.read_bytes() for path in (whole / "tensorboard").rglob("*") if path.is_file())
  assert b"eval/accuracy" in events and b"eval/exact_match" in events and b"test/exact_match" in events

  train_and_evaluate(mqar_config(**{"train.steps": 32}), str(resumed))
  train_and_evaluate(mqar_config(), str(resumed))
  assert "resumed from step 32" in capsys.readouterr().out
  step_a, params_a = final_params(whole)
  step_b, params_b = final_params(resumed)
  assert step_a == step_b == 64
  assert_same_params(params_a, params_b, atol=1e-6)

  main.main(["evaluate", f"--workdir={whole}", "--split=test"])
  evaluated = json.loads((whole / "evaluate_test_32.json").read_text())
  assert evaluated["accuracy"] == pytest.approx(saved["test_accuracy"], abs=1e-6)
  assert evaluated["exact_match"] == pytest.approx(saved["test_exact_match"], abs=1e-6)
  assert "exact match" in capsys.readouterr().out
