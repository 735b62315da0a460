"""The language-modelling task: bits per byte against a direct count, its final results, the xz baseline."""

import lzma
import math
import pathlib

import jax
import numpy as np
import pytest

from helpers import direct_nats, positional_overrides
from jformer import config as config_lib
from jformer import positional, tasks
from jformer.data.baselines import split_text_bytes, xz_bits_per_byte
from jformer.ops.tokens import EOS_ID
from jformer.train.step import make_eval_step


class FakeLMDatasets:
  """The `LMDatasets` interface the task reads (contract of issue 14), over given (text, token ids) documents:
  every document's tokens + EOS once, cut into pieces of at most max_length, one piece per row from position 0,
  all-padding rows filling the last batch."""

  def __init__(self, splits: dict, rows: int, max_length: int):
    self.splits, self.rows, self.max_length = splits, rows, max_length

  def documents(self, split):
    return [text for text, _ in self.splits[split]]

  def split_bytes(self, split):
    return sum(len(text.encode("utf-8")) + 1 for text in self.documents(split))

  def eval_batches(self, split="valid", max_length=None):
    length = max_length or self.max_length
    pieces = [ids[i:i + length] for _, ids in self.splits[split] for i in range(0, len(ids), length)]
    pieces += [[]] * (-len(pieces) % self.rows)
    for start in range(0, len(pieces), self.rows):
      batch = {key: np.zeros((self.rows, length), np.int32)
               for key in ("targets", "targets_segmentation", "targets_position")}
      for row, piece in enumerate(pieces[start:start + self.rows]):
        batch["targets"][row, :len(piece)] = piece
        batch["targets_segmentation"][row, :len(piece)] = 1
        batch["targets_position"][row, :len(piece)] = np.arange(len(piece))
      yield batch


def tiny_lm_config(**extra):
  overrides = {"model.architecture": "lm", "model.vocab_size": 40, "model.d_model": 32, "model.num_heads": 2,
               "model.d_ff": 64, "model.num_decoder_layers": 2, "model.max_length": 32, "data.max_length": 12,
               "train.eval_lengths": "(5, 12)"}
  overrides.update(extra)
  return config_lib.load(pathlib.Path(__file__).parents[1] / "configs" / "small.py", overrides)


def documents(rng, lengths):
  """(text, token ids + EOS) documents of the given token counts (EOS included); texts of various UTF-8 sizes."""
  return [("d" * n + "é" * (n % 3), list(rng.integers(3, 40, n - 1)) + [EOS_ID]) for n in lengths]


@pytest.fixture(scope="module")
def lm():
  config = tiny_lm_config()
  model = tasks.build_model(config)
  params = model.init(jax.random.PRNGKey(1), np.ones((1, 8), np.int32))["params"]
  rng = np.random.default_rng(0)
  splits = {"train": documents(rng, [9, 4]), "valid": documents(rng, [5, 12, 9, 1]),
            "test": documents(rng, [7, 12, 3])}
  step = jax.jit(make_eval_step(model))
  return config, model, params, FakeLMDatasets(splits, rows=8, max_length=12), lambda p, b: jax.device_get(step(p, b))


@pytest.mark.parametrize("max_length", [pytest.param(12, marks=pytest.mark.integration), 5])
def test_bits_per_byte_is_the_summed_nll_over_the_bytes(lm, max_length):
  config, model, params, datasets, eval_step = lm
  metrics = tasks.LanguageModelTask(config, datasets).evaluate(eval_step, params, "valid", max_length=max_length)
  apply = jax.jit(model.apply)
  nats = sum(direct_nats(apply, params, ids, max_length) for _, ids in datasets.splits["valid"])
  num_bytes = (5 + 2 * 2) + 12 + 9 + (1 + 2) + 4  # each text's UTF-8 bytes ("é" is 2), + 1 per document.
  assert datasets.split_bytes("valid") == num_bytes
  assert metrics["bits_per_byte"] == pytest.approx(nats / math.log(2) / num_bytes, rel=1e-5)
  assert metrics["loss"] == pytest.approx(nats / (5 + 12 + 9 + 1), rel=1e-5)  # every token, EOS included.
  assert metrics["perplexity"] == pytest.approx(math.exp(metrics["loss"]), rel=1e-6)
  assert 3 < metrics["bits_per_byte"] < 8  # an untrained model: about ln(40) nats per token.


# The default run: the encodings that read tables by position (learned, relative) and rotary; the slow run: all.
@pytest.mark.parametrize("encoding", [
    pytest.param(name, marks=() if name in ("learned", "relative", "rotary") else pytest.mark.slow)
    for name in positional.available()])
def test_every_positional_encoding_evaluates_beyond_the_training_length(lm, encoding):
  """Trained at data.max_length 12, scored at 32 = model.max_length: the tables cover it, learned ones included."""
  _, _, _, datasets, _ = lm
  config = tiny_lm_config(**positional_overrides(encoding))
  model = tasks.build_model(config)
  params = model.init(jax.random.PRNGKey(1), np.ones((1, 8), np.int32))["params"]
  step = jax.jit(make_eval_step(model))
  task = tasks.LanguageModelTask(config, datasets)
  at = {length: task.evaluate(lambda p, b: jax.device_get(step(p, b)), params, "test", max_length=length)
        for length in (12, 32)}
  assert all(3 < metrics["bits_per_byte"] < 8 for metrics in at.values()), at
  # No test document is longer than 12 tokens, so rows of 32 hold the same pieces, with more padding: same score.
  assert at[32]["bits_per_byte"] == pytest.approx(at[12]["bits_per_byte"], rel=1e-5)


def test_final_results_hold_the_contract_keys(lm, capsys):
  config, model, params, datasets, eval_step = lm
  task = tasks.LanguageModelTask(config, datasets)
  results = task.final_results(model, params, eval_step)
  assert set(results) == {"xz_bits_per_byte", "test_bits_per_byte", "test_bits_per_byte_at"}
  at = results["test_bits_per_byte_at"]
  assert list(at) == ["5", "12"]
  assert at["12"] == results["test_bits_per_byte"]  # data.max_length = 12.
  assert at["5"] == pytest.approx(task.evaluate(eval_step, params, "test", max_length=5)["bits_per_byte"])
  assert at["5"] != pytest.approx(at["12"], rel=1e-4)  # another context, another score.
  assert results["xz_bits_per_byte"] == xz_bits_per_byte(datasets.documents("train"), datasets.documents("valid"))
  assert "test bits per byte by context: 5: " in capsys.readouterr().out
  line = task.summary({"eval_bits_per_byte": 1.5, **results})
  assert line.startswith("eval bits per byte 1.5000 (xz -9: ") and "test bits per byte" in line
  assert set(task.score_split(model, params, eval_step, "valid")) == {"loss", "accuracy", "perplexity",
                                                                       "bits_per_byte", "xz_bits_per_byte"}
  assert "xz_bits_per_byte" not in task.score_split(model, params, eval_step, "test")


def test_xz_baseline_by_hand():
  train, valid = ["the cat sat", "on the mat"], ["the cat sat on the mat"]
  assert split_text_bytes(valid) == b"the cat sat on the mat\n"  # 23 bytes: the text and its end.
  t = b"the cat sat\non the mat\n"
  expected = 8 * (len(lzma.compress(t + b"the cat sat on the mat\n", preset=9)) - len(lzma.compress(t, preset=9))) / 23
  assert xz_bits_per_byte(train, valid) == expected
  # Text seen in the train split costs xz little; random bytes (as Latin-1 text) cost it more than 8 bits each.
  rng = np.random.default_rng(0)
  seen = ["".join(chr(c) for c in rng.integers(97, 123, 5000))]
  assert xz_bits_per_byte(seen, seen) < 0.2
  assert xz_bits_per_byte(["x"], ["".join(chr(c) for c in rng.integers(97, 123, 5000))]) > 4.5
  with pytest.raises(ValueError, match="valid split has no documents"):
    xz_bits_per_byte(train, [])


def test_eval_lengths_are_validated():
  with pytest.raises(ValueError, match=r"train.eval_lengths=\(1, 12, 64\): \[1, 64\] not whole numbers from 2 to "
                                       r"model.max_length=32"):
    tiny_lm_config(**{"train.eval_lengths": "(1, 12, 64)"})
  assert tiny_lm_config(**{"train.eval_lengths": "()"}).train.eval_lengths == ()


def test_lm_demo_config_loads_and_evaluates_up_to_1024_with_every_encoding():
  demo = pathlib.Path(__file__).parents[1] / "configs" / "lm_demo.py"
  for encoding in positional.available():
    config = config_lib.load(demo, {"model.positional": encoding})
    assert (config.model.architecture, config.data.dataset, config.data.pack) == ("lm", "text", "documents")
    assert config.data.max_length == 256 and max(config.train.eval_lengths) == config.model.max_length == 1024
  assert config.train.budget_minutes == 10 and config.optimizer.cooldown_fraction == 0.2
