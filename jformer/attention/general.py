"""`general`: bilinear attention, score(q, k) = q^T W k per head (Luong et al. 2015, "general")."""

from __future__ import annotations

import jax.numpy as jnp

from jformer.attention import scored
from jformer.attention.registry import register
from jformer.registry import Param


def _scaled_identity(key, shape, dtype=jnp.float32):
  """I / sqrt(d) per head: at initialisation q^T W k = q . k / sqrt(d), the paper's scaled dot product."""
  del key
  return jnp.broadcast_to(jnp.eye(shape[-1], dtype=dtype) * shape[-1] ** -0.5, shape)


PARAMS = {"bilinear": Param(("heads", "head_dim", "head_dim"), _scaled_identity, axes=("heads", "head_dim", None))}


def project(query, key, params):
  """q^T W `[B, T, H, D]` (once per query); the score is then the plain inner product with k."""
  return jnp.einsum("bthd,hde->bthe", query, params["bilinear"].astype(query.dtype)), key, None


@register("general", supports=scored.FEATURES, params=PARAMS, weights=scored.weights(project, scored.dot),
          example_options=dict(query_chunk_size=4, key_chunk_size=3))
def general(query, key, value, *, params, query_chunk_size: int = 256, key_chunk_size: int = 512, **masking):
  """General (bilinear) attention: softmax(q^T W_h k + bias) V with a learned `[head_dim, head_dim]` W_h per head.

  Luong et al. 2015, eq. 8 ("general"). W_h starts at I / sqrt(d_k), i.e. as the paper's scaled dot product, and
  learns a bilinear similarity from there. Computed chunk by chunk (`scored`): memory linear in length.

  Arguments (the variant signature, `params` as PARAMS declares, the chunk sizes as options) and result
  `[B, T, H, Dv]`: as every similarity variant's, see `scored.attention`.
  """
  return scored.attention(project, scored.dot, query, key, value, params=params, query_chunk_size=query_chunk_size,
                          key_chunk_size=key_chunk_size, **masking)
