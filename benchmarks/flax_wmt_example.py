"""The Flax WMT example (`examples/wmt` of the installed flax's source release) as a decoding peer.

The example is not part of the flax wheel: its `models.py` and `decode.py` are read from flax's source
distribution of the installed version, which `pip download` fetches from PyPI once into `CACHE` (or pass the
.tar.gz with `--flax-sdist`). Nothing of the example is kept in this repository; it is Apache-2.0, as its files say.

`decode_function` runs the example's own fast decoding the way its `train.py` does (`initialize_cache`,
`predict_step`: the encoder, `decode.flat_batch_beam_expand`, `models.Transformer.decode` with the `cache`
collection, `decode.beam_search`), on a model of `benchmarks/common.py`'s shape. Its `beam_search` with one beam
is its greedy search (the example has no other). EOS is made unreachable as in `benchmarks/decode.py` (its logit
-1e9 at every step), so every beam runs all steps.
"""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
import tarfile

CACHE = pathlib.Path.home() / ".cache" / "jformer" / "flax_examples"
FILES = ("models.py", "decode.py")


def example_dir(sdist: str | None = None) -> pathlib.Path:
  """The folder holding the installed flax version's `examples/wmt/{models,decode}.py`, extracted from `sdist` (a
  flax-<version>.tar.gz) or from the one `pip download` puts in CACHE. Raises RuntimeError naming what to do when
  neither can be had."""
  import flax

  version = flax.__version__
  target = CACHE / f"flax-{version}" / "wmt"
  if all((target / name).exists() for name in FILES):
    return target
  if sdist is None:
    CACHE.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", f"flax=={version}", "--no-binary", ":all:", "--no-deps",
               "--quiet", "-d", str(CACHE)]
    done = subprocess.run(command, capture_output=True, text=True)
    sdist = str(CACHE / f"flax-{version}.tar.gz")
    if done.returncode != 0 or not pathlib.Path(sdist).exists():
      raise RuntimeError(f"the Flax WMT example comes from flax {version}'s source release, and `{' '.join(command)}` "
                         f"failed ({done.stderr.strip()[-300:]}); download flax-{version}.tar.gz from PyPI and pass "
                         "--flax-sdist=PATH")
  target.mkdir(parents=True, exist_ok=True)
  with tarfile.open(sdist) as archive:
    for name in FILES:
      try:
        member = archive.extractfile(f"flax-{version}/examples/wmt/{name}")
      except KeyError:
        member = None
      if member is None:
        raise RuntimeError(f"{sdist} has no flax-{version}/examples/wmt/{name}: not flax {version}'s source "
                           "release?")
      (target / name).write_bytes(member.read())
  return target


def load(sdist: str | None = None):
  """(models, decode): the example's two modules, imported from `example_dir(sdist)`."""
  folder = example_dir(sdist)
  modules = []
  for name in FILES:
    spec = importlib.util.spec_from_file_location(f"flax_wmt_example_{name[:-3]}", folder / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    modules.append(module)
  return tuple(modules)


def model_config(models, shape, dtype, max_length: int):
  """The example's `TransformerConfig` of `shape` (common.Shape): shared, tied embeddings as jformer's benchmark
  model, no dropout (decoding)."""
  import jax.numpy as jnp

  values = dict(vocab_size=shape.vocab, output_vocab_size=shape.vocab, share_embeddings=True,
                logits_via_embedding=True, dtype=jnp.dtype(dtype), emb_dim=shape.d_model, num_heads=shape.heads,
                num_layers=shape.layers, qkv_dim=shape.d_model, mlp_dim=shape.d_ff, max_len=max_length,
                dropout_rate=0.0, attention_dropout_rate=0.0, deterministic=True)
  return models.TransformerConfig(**values)


def decode_function(modules, shape, dtype, inputs, steps: int, beam_size: int, alpha: float, eos_id: int):
  """(decode(params, inputs) -> ids [B, steps], params): the example's `predict_step` with `beam_size` beams
  (length penalty `alpha`) producing `steps` tokens, EOS blocked; random parameters (seed 0)."""
  import jax
  import jax.numpy as jnp

  models, decode = modules
  max_decode_len = steps + 1  # the example's loop runs max_decode_len - 1 steps after its start token.
  config = model_config(models, shape, dtype, max_length=max(inputs.shape[1], max_decode_len))
  decode_config = config.replace(decode=True)
  target_shape = (inputs.shape[0], max_decode_len)
  params = jax.jit(models.Transformer(config).init)(jax.random.key(0), jnp.ones(inputs.shape, jnp.int32),
                                                    jnp.ones(target_shape, jnp.int32))["params"]

  def run(params, inputs):
    cache = models.Transformer(decode_config).init(jax.random.key(0), jnp.ones(inputs.shape, config.dtype),
                                                   jnp.ones(target_shape, config.dtype))["cache"]
    encoded = decode.flat_batch_beam_expand(
        models.Transformer(decode_config).apply({"params": params}, inputs, method=models.Transformer.encode),
        beam_size)
    raw_inputs = decode.flat_batch_beam_expand(inputs, beam_size)

    def tokens_ids_to_logits(flat_ids, flat_cache):
      flat_logits, new_vars = models.Transformer(decode_config).apply(
          {"params": params, "cache": flat_cache}, encoded, raw_inputs, flat_ids, mutable=["cache"],
          method=models.Transformer.decode)
      return flat_logits.squeeze(axis=1).at[:, eos_id].set(-1e9), new_vars["cache"]

    sequences, _ = decode.beam_search(inputs, cache, tokens_ids_to_logits, beam_size=beam_size, alpha=alpha,
                                      eos_id=eos_id, max_decode_len=max_decode_len)
    return sequences[:, -1, 1:]

  return run, params
