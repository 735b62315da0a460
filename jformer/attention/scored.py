"""Softmax attention over another similarity function: out = softmax(score(Q, K) + bias) V, chunk by chunk.

Not a variant itself: the similarity variants (`additive`, `general`, `cosine`, `dot_product_unscaled`) are
each a file that defines two pure functions and registers them through `attention` and `weights` here:
- `project(query [B, T, H, D], key [B, S, H, D], params) -> (q [B, T, H, E], k [B, S, H, E], score_params)`:
  the per-token work, done once per call (e.g. additive's W_q q and W_k k, cosine's normalisation);
- `score(q [B, H, cq, E], k [B, H, ck, E], score_params) -> [B, H, cq, ck]` float32: the pairwise work,
  done block by block by `blockwise` (online softmax forward, recomputing backward), so memory stays linear in
  the length whatever the score holds per pair (additive: `[B, H, cq, ck, hidden]` for one block only).
The registry repeats key/value heads for these variants (they do not declare "gqa"), so H heads come in.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from jformer.attention import blockwise
from jformer.attention.registry import MASKING
from jformer.ops.masks import attention_mask

# What a similarity variant supports: everything but dropout (the blockwise engine has none) and the soft-cap.
FEATURES = frozenset({"causal", "segment_ids", "positions", "mask", "bias", "decode", "window"})

Project = Callable[..., tuple]
Score = Callable[..., jax.Array]


def dot(q_BxHxQxE: jax.Array, k_BxHxCxE: jax.Array, params=None) -> jax.Array:
  """The plain inner product q . k (no scale), `[B, H, cq, ck]` float32: the score of the dot-product family."""
  del params
  return jnp.einsum("bhqe,bhce->bhqc", q_BxHxQxE, k_BxHxCxE, preferred_element_type=jnp.float32)


def attention(project: Project, score: Score, query, key, value, *, params=None, query_chunk_size: int,
              key_chunk_size: int, dropout_rate=0.0, dropout_rng=None, **masking) -> jax.Array:
  """softmax(score(project(Q, K)) + bias) V over the visible keys (`masking`: the variant signature's), computed
  `query_chunk_size` x `key_chunk_size` at a time: `[B, T, H, Dv]` in the query dtype."""
  del dropout_rate, dropout_rng  # not declared: the registry refuses dropout before calling.
  q_BxTxHxE, k_BxSxHxE, score_params = project(query, key, params)
  return blockwise.attention(q_BxTxHxE, k_BxSxHxE, value, **{k: masking.get(k, v) for k, v in MASKING.items()},
                             query_chunk_size=min(query_chunk_size, query.shape[1]),
                             key_chunk_size=min(key_chunk_size, key.shape[1]), score=score,
                             params=score_params).astype(query.dtype)


def weights(project: Project, score: Score) -> Callable:
  """The variant's `weights=`: softmax(score + bias) over the visible keys, `[B, H, T, S]` float32, computed on
  the whole `[T, S]` at once (attention maps; the explicit formula the test matrix checks the chunks against)."""

  def weights_fn(query, key, *, params=None, **kwargs):
    masking = {k: kwargs.get(k, v) for k, v in MASKING.items()}  # the rest of kwargs: options, used by `fn` only
    q_BxTxHxE, k_BxSxHxE, score_params = project(query, key, params)
    logits_BxHxTxS = score(jnp.swapaxes(q_BxTxHxE, 1, 2), jnp.swapaxes(k_BxSxHxE, 1, 2), score_params)
    if masking["bias"] is not None:
      logits_BxHxTxS = logits_BxHxTxS + masking["bias"].astype(jnp.float32)
    visible = attention_mask(query.shape[1], key.shape[1], **{k: v for k, v in masking.items() if k != "bias"})
    if visible is not None:
      logits_BxHxTxS = jnp.where(visible, logits_BxHxTxS, jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(logits_BxHxTxS, axis=-1)

  return weights_fn
