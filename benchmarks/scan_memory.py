"""Temporary memory of the gradient step, layers looped against scanned (`model.scan_layers`), at long sequences.

The decoder-only language model of `benchmarks/compile.py` (d_model 128, 4 heads, d_ff 512, vocabulary 1024,
dropout 0, float32, the default `model.remat='auto'` and attention) at batch 1 x `--length` tokens: XLA's
temporary bytes (`compiled.memory_analysis().temp_size_in_bytes`, deterministic: nothing is run) of the jitted
gradient of the training loss, per layout, and their ratio.

    python benchmarks/scan_memory.py [--length=4096] [--layers=4]
"""

from __future__ import annotations

import argparse

import common
from compile import D_FF, D_MODEL, HEADS, VOCAB

GIB = 2**30


def temp_bytes(length: int, layers: int, scan: bool) -> int:
  """Temporary bytes of the compiled gradient of the mean training-mode logit sum, `layers` layers at `length`."""
  import jax
  import jax.numpy as jnp

  from jformer.models import LanguageModel, TransformerConfig

  config = TransformerConfig(architecture="lm", vocab_size=VOCAB, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF,
                             num_encoder_layers=0, num_decoder_layers=layers, dropout_rate=0.0, max_length=length,
                             scan_layers=scan)
  config.validate()
  model = LanguageModel(config)
  tokens = jnp.ones((1, length), jnp.int32)
  params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), tokens))["params"]
  loss = lambda p: model.apply({"params": p}, tokens, deterministic=False).mean()
  return jax.jit(jax.grad(loss)).lower(params).compile().memory_analysis().temp_size_in_bytes


def main(argv=None):
  common.setup()
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--length", type=int, default=4096)
  parser.add_argument("--layers", type=int, default=4)
  args = parser.parse_args(argv)
  common.announce()
  looped, scanned = (temp_bytes(args.length, args.layers, scan) for scan in (False, True))
  print(f"{args.layers} layers, batch 1 x {args.length} tokens: temporary memory looped {looped / GIB:.3f} GiB, "
        f"scanned {scanned / GIB:.3f} GiB (scanned / looped {scanned / looped:.2f})")


if __name__ == "__main__":
  main()
