"""jformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in functional JAX/Flax.

Layers, each importing only the ones below it:
  ops/        pure jax.numpy functions (attention, masks, positional encodings, losses)
  attention/  registry of attention variants (name -> pure function)
  models/     Flax Linen modules built from a frozen TransformerConfig
  data/, decode/, checkpoint/, parallel/, train/   built on the models
"""

__version__ = "0.1.0"
