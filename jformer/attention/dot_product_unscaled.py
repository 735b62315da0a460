"""`dot_product_unscaled`: softmax(Q K^T) V without the 1/sqrt(d_k) of eq. 1 (to reproduce paper Sec. 3.2.1)."""

from __future__ import annotations

from jformer.attention import scored
from jformer.attention.registry import register


def project(query, key, params):
  """Nothing per token: the score is the plain inner product."""
  del params
  return query, key, None


@register("dot_product_unscaled", supports=scored.FEATURES, weights=scored.weights(project, scored.dot),
          example_options=dict(query_chunk_size=4, key_chunk_size=3))
def dot_product_unscaled(query, key, value, *, query_chunk_size: int = 256, key_chunk_size: int = 512, **masking):
  """Unscaled dot-product attention: softmax(Q K^T + bias) V, the paper's eq. 1 without 1/sqrt(d_k).

  Paper Sec. 3.2.1: "for large values of d_k, the dot products grow large in magnitude, pushing the softmax
  function into regions where it has extremely small gradients"; the scale counteracts it. This variant removes
  it, to measure that. Computed chunk by chunk (`scored`): memory linear in length.

  Args:
    query `[B, T, H, D]`, key `[B, S, H, D]`, value `[B, S, H, Dv]`, the masking arguments of the variant
    signature. query_chunk_size, key_chunk_size: options.

  Returns:
    `[B, T, H, Dv]`.
  """
  return scored.attention(project, scored.dot, query, key, value, query_chunk_size=query_chunk_size,
                          key_chunk_size=key_chunk_size, **masking)
