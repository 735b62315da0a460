"""`sigmoid`: sigmoid attention (Ramapuram et al. 2024), sigmoid(Q K^T / sqrt(d) + b) V with b = -log(n): each weight
on its own, no normalisation over the keys.

n is a constant of the model, the training sequence length (option `sequence_length`), as in the authors' own
implementation (axlearn's `SigmoidAttention.seq_len`, "maximum sequence length used"): not the number of keys a
query sees, so causal masking, padding and packed rows change no weight of a visible key, and a decode step (one
query against a cache of any length) computes what the full forward pass computes at its position.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jformer.attention.registry import MASKING, register
from jformer.ops.attention import dot_product_logits
from jformer.ops.dropout import dropout
from jformer.ops.masks import attention_mask

# n of b = -log(n) where nobody sets it: the LM demo's training rows (configs/lm_demo.py). Set
# `model.attention_options.sequence_length` to the length you train at (`data.max_length`).
SEQUENCE_LENGTH = 256


def sigmoid_weights(query, key, *, sequence_length: int = SEQUENCE_LENGTH, **masking) -> jax.Array:
  """sigmoid(cap(Q K^T / sqrt(d_k)) + bias - log(n)) at the visible keys, 0 at the others: `[B, H, T, S]` float32,
  rows not normalised (a query that sees no key gets 0). `masking`: the variant signature's (and its soft-cap)."""
  visible = attention_mask(query.shape[1], key.shape[1], **{k: masking.get(k, v) for k, v in MASKING.items()
                                                              if k != "bias"})
  logits_BxHxTxS = dot_product_logits(query, key, bias=masking.get("bias"), softcap=masking.get("logits_softcap", 0.0))
  weights_BxHxTxS = jax.nn.sigmoid(logits_BxHxTxS - math.log(sequence_length))
  return weights_BxHxTxS if visible is None else jnp.where(visible, weights_BxHxTxS, 0.0)


@register("sigmoid", supports={"causal", "segment_ids", "positions", "mask", "bias", "dropout", "decode", "softcap",
                               "window"},
          weights=sigmoid_weights, example_options=dict(sequence_length=8))
def sigmoid(query, key, value, *, dropout_rate=0.0, dropout_rng=None, sequence_length: int = SEQUENCE_LENGTH,
            **masking):
  """Sigmoid attention (Ramapuram et al. 2024): out_i = sum_j sigmoid(q_i . k_j / sqrt(d_k) + bias_ij - log n) v_j.

  Every weight is a sigmoid of its own logit: keys do not compete for a unit of mass as under softmax, and the bias
  b = -log(n) (n = `sequence_length`, module doc) makes each weight about 1/n while the logits are small, so the
  output starts at the scale of softmax attention's (the paper's remedy for large attention norms early in
  training; it also recommends LayerScale or hybrid norms around the block). A positional bias (ALiBi, T5's) is
  added inside the sigmoid. Dense: the weights `[B, H, T, S]` in memory, as `dot_product`'s; dropout drops weights.

  Args:
    query `[B, T, H, D]`, key `[B, S, H, D]`, value `[B, S, H, Dv]` (fewer key/value heads are repeated by the
    registry), the arguments of the variant signature (`jformer/attention/__init__.py`).
    sequence_length: n (option), a positive int; default SEQUENCE_LENGTH.

  Returns:
    `[B, T, H, Dv]`.
  """
  weights_BxHxTxS = sigmoid_weights(query, key, sequence_length=sequence_length, **masking).astype(value.dtype)
  if dropout_rate > 0.0:
    if dropout_rng is None:
      raise ValueError("attention variant 'sigmoid': dropout_rate > 0 needs a dropout_rng")
    weights_BxHxTxS = dropout(weights_BxHxTxS, dropout_rate, dropout_rng)
  return jnp.einsum("bhts,bshd->bthd", weights_BxHxTxS, value)
