"""`additive`: Bahdanau attention, score(q, k) = v_a^T tanh(W_q q + W_k k), per head (Bahdanau et al. 2015)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.attention import scored
from jformer.attention.registry import register
from jformer.registry import Param


def _normal_over_last(key, shape, dtype=jnp.float32):
  """N(0, 1/n) with n the last dimension (v_a: unit-scale scores from unit-scale tanh features)."""
  return jax.random.normal(key, shape, dtype) * shape[-1] ** -0.5


# W_q, W_k: [heads, head_dim, hidden] (fan-in head_dim); v_a: [heads, hidden]. Sharded with the heads.
_PROJECTION = Param(("heads", "head_dim", "hidden_size"), jax.nn.initializers.lecun_normal(in_axis=-2, out_axis=-1,
                                                                                           batch_axis=(0,)),
                    axes=("heads", "head_dim", None))
PARAMS = {"query_weight": _PROJECTION, "key_weight": _PROJECTION,
          "score_weight": Param(("heads", "hidden_size"), _normal_over_last, axes=("heads", None))}


def project(query, key, params):
  """W_q q `[B, T, H, A]` and W_k k `[B, S, H, A]`, computed once per token; the score needs v_a."""
  q_BxTxHxA = jnp.einsum("bthd,hda->btha", query, params["query_weight"].astype(query.dtype))
  k_BxSxHxA = jnp.einsum("bshd,hda->bsha", key, params["key_weight"].astype(key.dtype))
  return q_BxTxHxA, k_BxSxHxA, params["score_weight"]


def score(q_BxHxQxA, k_BxHxCxA, score_weight_HxA):
  """v_a^T tanh(W_q q_i + W_k k_j): `[B, H, cq, ck]` float32 (holds `[B, H, cq, ck, A]` for one block)."""
  features = jnp.tanh(q_BxHxQxA[:, :, :, None, :].astype(jnp.float32) + k_BxHxCxA[:, :, None, :, :])
  return jnp.einsum("bhqca,ha->bhqc", features, score_weight_HxA.astype(jnp.float32))


@register("additive", supports=scored.FEATURES, params=PARAMS, weights=scored.weights(project, score),
          example_options=dict(hidden_size=5, query_chunk_size=4, key_chunk_size=3))
def additive(query, key, value, *, params, hidden_size: int = 64, query_chunk_size: int = 64,
             key_chunk_size: int = 64, **masking):
  """Additive (Bahdanau) attention: softmax(v_a^T tanh(W_q q + W_k k) + bias) V, memory linear in length.

  Bahdanau et al. 2015, eq. 6 (a_ij = v_a^T tanh(W_a s_i + U_a h_j)), per head with its own W_q, W_k
  `[head_dim, hidden_size]` and v_a `[hidden_size]`. The pairwise tanh features `[T, S, hidden_size]` are what
  makes it slower and hungrier than dot-product attention (paper Sec. 3.2.1); here they exist one block of
  `query_chunk_size` x `key_chunk_size` pairs at a time (`scored`, `blockwise`). Luong et al. 2015's "concat"
  score v_a^T tanh(W_a [q; k]) is this same function (W_a = [W_q W_k]), so it has no variant of its own.

  Args:
    query `[B, T, H, D]`, key `[B, S, H, D]`, value `[B, S, H, Dv]`, `params` (PARAMS), the masking arguments of
    the variant signature. hidden_size: the width of the tanh layer (option; shapes the parameters).
    query_chunk_size, key_chunk_size: the block of pairs computed at once (options).

  Returns:
    `[B, T, H, Dv]`.
  """
  del hidden_size  # shapes the parameters only
  return scored.attention(project, score, query, key, value, params=params, query_chunk_size=query_chunk_size,
                          key_chunk_size=key_chunk_size, **masking)
