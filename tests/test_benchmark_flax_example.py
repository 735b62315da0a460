"""benchmarks/flax_wmt_example.py: the Flax WMT example's files come from flax's source release (extracted once,
refused with a clear error when missing), and `decode_function` drives the example's decoding the way its
train.py does: a stand-in example (a release built here, in place of the one PyPI would give) checks the wiring
everywhere; the real example's decoding runs where its release is at hand (the slow pass)."""

import io
import tarfile

import numpy as np
import pytest
from helpers import import_benchmark

flax_wmt_example = import_benchmark("flax_wmt_example")


def fake_release(path, version, files):
  with tarfile.open(path, "w:gz") as archive:
    for name, text in files.items():
      data = text.encode()
      info = tarfile.TarInfo(f"flax-{version}/examples/wmt/{name}")
      info.size = len(data)
      archive.addfile(info, io.BytesIO(data))
  return str(path)


def test_the_examples_files_are_read_from_the_source_release(tmp_path, monkeypatch):
  import flax

  monkeypatch.setattr(flax_wmt_example, "CACHE", tmp_path / "cache")
  files = {"models.py": "WHAT = 'models'\n", "decode.py": "WHAT = 'decode'\n", "train.py": "import tensorflow\n"}
  sdist = fake_release(tmp_path / "flax.tar.gz", flax.__version__, files)
  models, decode = flax_wmt_example.load(sdist)
  assert (models.WHAT, decode.WHAT) == ("models", "decode")
  folder = tmp_path / "cache" / f"flax-{flax.__version__}" / "wmt"
  assert sorted(p.name for p in folder.iterdir()) == ["decode.py", "models.py"]  # only what the peer runs.
  assert flax_wmt_example.example_dir() == folder  # extracted once: no second download.


def test_a_release_without_the_example_is_refused_naming_the_file(tmp_path, monkeypatch):
  import flax

  monkeypatch.setattr(flax_wmt_example, "CACHE", tmp_path / "cache")
  sdist = fake_release(tmp_path / "flax.tar.gz", flax.__version__, {"models.py": "\n"})
  with pytest.raises(RuntimeError, match="has no flax-.*/examples/wmt/decode.py"):
    flax_wmt_example.load(sdist)


# A stand-in for the example's models.py and decode.py, of their interface: a model whose decode step prefers EOS
# (id 2) by far, then the token `3 + step` (the step counted in its cache), and a beam search that keeps each beam's
# best token. `decode_function` blocks EOS and threads the cache, so every row decodes 4, 5, 6, ...
STAND_IN_MODELS = """
import dataclasses

import flax.linen as nn
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  vocab_size: int
  output_vocab_size: int
  share_embeddings: bool
  logits_via_embedding: bool
  dtype: object
  emb_dim: int
  num_heads: int
  num_layers: int
  qkv_dim: int
  mlp_dim: int
  max_len: int
  dropout_rate: float
  attention_dropout_rate: float
  deterministic: bool
  decode: bool = False

  def replace(self, **changes):
    return dataclasses.replace(self, **changes)


class StepCounter(nn.Module):
  @nn.compact
  def __call__(self, decode):
    step = self.variable("cache", "step", lambda: jnp.zeros((), jnp.int32))
    if decode and not self.is_initializing():
      step.value += 1
    return step.value


class Transformer(nn.Module):
  config: TransformerConfig

  def setup(self):
    self.embed = nn.Embed(self.config.vocab_size, self.config.emb_dim)
    self.counter = StepCounter()

  def encode(self, inputs):
    return self.embed(inputs.astype(jnp.int32)).mean(axis=1, keepdims=True)

  def decode(self, encoded, inputs, targets):
    step = self.counter(self.config.decode)
    logits = self.embed.attend(self.embed(targets.astype(jnp.int32)) + encoded)
    preferred = jnp.zeros(self.config.vocab_size).at[2].set(1e6).at[3 + step].set(1e3)
    return logits + preferred

  def __call__(self, inputs, targets):
    return self.decode(self.encode(inputs), inputs, targets)
"""

STAND_IN_DECODE = """
import jax.numpy as jnp


def flat_batch_beam_expand(x, beam_size):
  return jnp.repeat(x, beam_size, axis=0)


def beam_search(inputs, cache, tokens_to_logits, beam_size, alpha, eos_id, max_decode_len):
  del alpha, eos_id
  ids = jnp.zeros((inputs.shape[0] * beam_size, 1), jnp.int32)
  sequence = [ids[:, 0]]
  for _ in range(max_decode_len - 1):
    logits, cache = tokens_to_logits(ids, cache)
    ids = logits.argmax(-1)[:, None].astype(jnp.int32)
    sequence.append(ids[:, 0])
  return jnp.stack(sequence, 1).reshape(inputs.shape[0], beam_size, max_decode_len), None
"""


def toy_shape():
  common = import_benchmark("common")
  return common.Shape("TOY", vocab=64, d_model=32, heads=2, d_ff=64, layers=1, batch=2, source_length=8,
                      target_length=8)


def test_decode_function_drives_the_example_with_eos_blocked_and_its_cache_threaded(tmp_path, monkeypatch):
  """On a stand-in example served as a source release (no network): each beam decodes `steps` tokens, never EOS
  (which the model prefers by far), each step reading the cache the previous one wrote."""
  import flax
  import jax

  monkeypatch.setattr(flax_wmt_example, "CACHE", tmp_path / "cache")
  sdist = fake_release(tmp_path / "flax.tar.gz", flax.__version__,
                       {"models.py": STAND_IN_MODELS, "decode.py": STAND_IN_DECODE})
  modules = flax_wmt_example.load(sdist)
  inputs = jax.numpy.asarray(np.random.default_rng(0).integers(1, 64, (2, 8), dtype=np.int32))
  run, params = flax_wmt_example.decode_function(modules, toy_shape(), "float32", inputs, steps=5, beam_size=3,
                                                 alpha=0.6, eos_id=2)
  np.testing.assert_array_equal(jax.jit(run)(params, inputs), [[4, 5, 6, 7, 8]] * 2)


@pytest.mark.slow  # where the real release is at hand (benchmarks/decode.py --flax-example fetches it).
def test_the_example_decodes_a_small_shape_with_eos_blocked():
  import flax
  import jax

  folder = flax_wmt_example.CACHE / f"flax-{flax.__version__}" / "wmt"
  if not (folder / "decode.py").exists():
    pytest.skip(f"the Flax WMT example is not extracted in {folder} (benchmarks/decode.py --flax-example does it)")
  toy = toy_shape()
  inputs = jax.numpy.asarray(np.random.default_rng(0).integers(1, 64, (2, 8), dtype=np.int32))
  for beams in (3, 1):
    run, params = flax_wmt_example.decode_function(flax_wmt_example.load(), toy, "float32", inputs, steps=5,
                                                   beam_size=beams, alpha=0.6, eos_id=2)
    ids = np.asarray(jax.jit(run)(params, inputs))
    assert ids.shape == (2, 5) and (ids != 2).all()
