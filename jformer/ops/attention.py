"""Scaled dot-product attention (the reference) and multi-head split/merge.

Shapes use B=batch, T=query length, S=key/value length, H=heads, D=head dim.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jformer.ops.dropout import dropout
from jformer.ops.softcap import soft_cap


def dot_product_attention(
    query: jax.Array,
    key: jax.Array,
    value: jax.Array,
    *,
    mask: jax.Array | None = None,
    bias: jax.Array | None = None,
    scale: float | None = None,
    softcap: float = 0.0,
    dropout_rate: float = 0.0,
    dropout_rng: jax.Array | None = None,
) -> jax.Array:
  """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V  (paper eq. 1), per head.

  Args:
    query: `[B, T, H, D]`.
    key: `[B, S, K, D]`; K = H, or K < H with H % K == 0 (grouped-query attention: query head h attends with
      key/value head h // (H / K); the heads are repeated, see `repeat_kv`).
    value: `[B, S, K, Dv]`.
    mask: boolean, broadcastable to `[B, H, T, S]`; True = the query may attend to the key.
    bias: additive logits bias, broadcastable to `[B, H, T, S]` (ALiBi, relative positions).
    scale: logits scale; defaults to `1 / sqrt(D)`.
    softcap: > 0: the scaled logits become softcap * tanh(logits / softcap) before the bias and the mask (Gemma 2's
      attention logit soft-cap); 0: off.
    dropout_rate: dropout on the attention weights (needs `dropout_rng` when > 0).
    dropout_rng: PRNG key for that dropout.

  Returns:
    `[B, T, H, Dv]`. A query whose keys are all masked gets the mean of the values (finite, never NaN).
  """
  if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
    raise ValueError(
        f"dot_product_attention expects [batch, length, heads, head_dim] arrays; got query {query.shape}, "
        f"key {key.shape}, value {value.shape}")
  if query.shape[-1] != key.shape[-1] or key.shape[:3] != value.shape[:3] or query.shape[2] % key.shape[2]:
    raise ValueError(f"query {query.shape}, key {key.shape} and value {value.shape} do not match: "
                     "query and key need the same head_dim, key and value the same [batch, length, heads], and "
                     "the query heads must be a multiple of the key/value heads")
  weights_BxHxTxS = dot_product_weights(query, key, mask=mask, bias=bias, scale=scale,
                                        softcap=softcap).astype(value.dtype)
  if dropout_rate > 0.0:
    if dropout_rng is None:
      raise ValueError("dropout_rate > 0 needs a dropout_rng")
    weights_BxHxTxS = dropout(weights_BxHxTxS, dropout_rate, dropout_rng)
  return jnp.einsum("bhts,bshd->bthd", weights_BxHxTxS, repeat_kv(value, query.shape[2]))


def dot_product_weights(query: jax.Array, key: jax.Array, *, mask: jax.Array | None = None,
                        bias: jax.Array | None = None, scale: float | None = None, softcap: float = 0.0,
                        score_mod: Callable[[jax.Array], jax.Array] | None = None) -> jax.Array:
  """The attention weights softmax(mod(cap(Q K^T * scale)) + bias) over the keys the mask allows (paper eq. 1; the
  logits are `dot_product_logits`').

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]` (H % K == 0); mask, bias, scale, softcap: as in
    `dot_product_attention`; score_mod: as in `dot_product_logits`.

  Returns:
    `[B, H, T, S]` float32; a query whose keys are all masked gets uniform weights.
  """
  logits_BxHxTxS = dot_product_logits(query, key, bias=bias, scale=scale, softcap=softcap, score_mod=score_mod)
  if mask is not None:
    logits_BxHxTxS = jnp.where(mask, logits_BxHxTxS, jnp.finfo(jnp.float32).min)
  return jax.nn.softmax(logits_BxHxTxS, axis=-1)


def dot_product_logits(query: jax.Array, key: jax.Array, *, bias: jax.Array | None = None,
                       scale: float | None = None, softcap: float = 0.0,
                       score_mod: Callable[[jax.Array], jax.Array] | None = None) -> jax.Array:
  """The attention logits mod(cap(Q K^T * scale)) + bias, unmasked (cap is the soft-cap, the identity when `softcap`
  is 0; mod is `score_mod`, the identity when None): softmax attention's before the softmax, sigmoid attention's
  before the sigmoid, stick-breaking's before its log-sigmoid.

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]` (H % K == 0); bias, scale, softcap: as in `dot_product_attention`.
    score_mod: `[B, H, T, S]` float32 logits -> logits broadcastable to them (a flex variant's,
    `jformer.attention.flex`).

  Returns:
    `[B, H, T, S]` float32.
  """
  if scale is None:
    scale = query.shape[-1] ** -0.5
  key = repeat_kv(key, query.shape[2])
  logits_BxHxTxS = jnp.einsum("bthd,bshd->bhts", query * jnp.asarray(scale, query.dtype), key)
  logits_BxHxTxS = soft_cap(logits_BxHxTxS.astype(jnp.float32), softcap)
  if score_mod is not None:
    logits_BxHxTxS = jnp.broadcast_to(score_mod(logits_BxHxTxS), logits_BxHxTxS.shape).astype(jnp.float32)
  if bias is not None:
    logits_BxHxTxS = logits_BxHxTxS + bias.astype(jnp.float32)
  return logits_BxHxTxS


def repeat_kv(x_BxSxKxD: jax.Array, num_heads: int) -> jax.Array:
  """`[B, S, K, D]` -> `[B, S, H, D]` (grouped-query attention): key/value head k serves query heads
  k * H/K ... (k + 1) * H/K - 1. The identity when K = H."""
  kv_heads = x_BxSxKxD.shape[2]
  return x_BxSxKxD if kv_heads == num_heads else jnp.repeat(x_BxSxKxD, num_heads // kv_heads, axis=2)


def split_heads(x_BxLxF: jax.Array, num_heads: int) -> jax.Array:
  """`[B, L, H*D]` -> `[B, L, H, D]`."""
  batch, length, features = x_BxLxF.shape
  if features % num_heads:
    raise ValueError(f"feature size {features} is not divisible by num_heads={num_heads}")
  return x_BxLxF.reshape(batch, length, num_heads, features // num_heads)


def merge_heads(x_BxLxHxD: jax.Array) -> jax.Array:
  """`[B, L, H, D]` -> `[B, L, H*D]` (the Concat(head_1, ..., head_h) of eq. 4 before W^O)."""
  batch, length, heads, head_dim = x_BxLxHxD.shape
  return x_BxLxHxD.reshape(batch, length, heads * head_dim)
