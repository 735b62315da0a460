"""Pieces shared by the decoders: the model-call convention, cache tiling and gathering, per-row length limits,
and the one-token-per-row loop behind greedy search and sampling.

Model-call convention (`TokensToLogits`): `tokens_to_logits(ids, cache) -> (logits, new_cache)` where `ids` is
int32 `[N, 1]` (the previous token of each of N flat rows; the first step gets the row's start token: `BOS_ID`, or
for a language model continuing a prompt, the prompt's last token), `logits` is `[N, vocab]`
for the next token, and `cache` is any pytree whose leaves with ndim >= 1 are row-wise (leading dimension N) while
scalar leaves (e.g. a shared cache index) belong to all rows and are never tiled or gathered. A scanned stack's
cache (`model.scan_layers`: the leaves under its `layers` key, `jformer.models.layout.STACKED`) holds its layers on
axis 0 and its rows on axis 1 (`row_axis`), its per-layer counters `[num_layers]` belonging to all rows.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from jformer.models.layout import STACKED
from jformer.ops.tokens import BOS_ID, EOS_ID, PAD_ID

PyTree = Any
TokensToLogits = Callable[[jax.Array, PyTree], tuple[jax.Array, PyTree]]
# pick(logits float32 [N, vocab], step int32 scalar) -> next token ids [N].
TokenPicker = Callable[[jax.Array, jax.Array], jax.Array]

# "Effectively minus infinity": finite, so sums and differences of masked scores stay finite.
NEG_INF = -1.0e7


def flat_batch_beam_expand(x: jax.Array, beam_size: int) -> jax.Array:
  """`[B, ...] -> [B * beam_size, ...]`: row b becomes rows `b * beam_size ... b * beam_size + beam_size - 1`."""
  return jnp.repeat(x, beam_size, axis=0)


def row_axis(path) -> int:
  """The axis holding the rows of the cache leaf at `path` (a `jax.tree_util` key path): 1 under a scanned stack's
  `layers` (its layers on axis 0), else 0."""
  return 1 if any(getattr(key, "key", None) == STACKED for key in path) else 0


def map_rows(fn: Callable[[jax.Array, int], jax.Array], cache: PyTree) -> PyTree:
  """`fn(leaf, axis)` on every row-wise leaf of `cache` (rows on `axis`, `row_axis`); the leaves of no more
  dimensions than that axis (a shared counter: a scalar, or a scanned stack's `[num_layers]`) pass through."""
  def apply(path, x):
    axis = row_axis(path)
    return x if jnp.ndim(x) <= axis else fn(x, axis)
  return jax.tree_util.tree_map_with_path(apply, cache)


def expand_cache(cache: PyTree, beam_size: int) -> PyTree:
  """`flat_batch_beam_expand` on every row-wise leaf of `cache` (`map_rows`)."""
  return map_rows(lambda x, axis: jnp.repeat(x, beam_size, axis=axis), cache)


def gather_cache_rows(cache: PyTree, rows: jax.Array) -> PyTree:
  """Row `r` of every row-wise leaf becomes row `rows[r]` of the input (`map_rows`)."""
  return map_rows(lambda x, axis: jnp.take(x, rows, axis=axis), cache)


def row_limits(max_lengths: jax.Array | None, batch_size: int, max_decode_len: int) -> jax.Array:
  """int32 `[B]`: the length (EOS included) at which each row is forced to emit EOS.

  `None` gives `max_decode_len + 1` everywhere, a length never reached: rows are then simply cut at
  `max_decode_len`. Limits below 1 count as 1 (the row emits EOS at once).
  """
  if max_lengths is None:
    return jnp.full((batch_size,), max_decode_len + 1, jnp.int32)
  limits = jnp.asarray(max_lengths, jnp.int32)
  if limits.shape != (batch_size,):
    raise ValueError(f"max_lengths must have shape ({batch_size},), got {limits.shape}")
  return jnp.maximum(limits, 1)


def start_tokens(start_ids: jax.Array | None, batch_size: int) -> jax.Array:
  """int32 `[B]`: the token each row's first step feeds, `start_ids` or `BOS_ID` (None)."""
  if start_ids is None:
    return jnp.full((batch_size,), BOS_ID, jnp.int32)
  start = jnp.asarray(start_ids, jnp.int32)
  if start.shape != (batch_size,):
    raise ValueError(f"start_ids must have shape ({batch_size},), got {start.shape}")
  return start


def model_step(tokens_to_logits: TokensToLogits, last_ids: jax.Array, cache: PyTree) -> tuple[jax.Array, PyTree]:
  """One model call on the previous token of each of N flat rows: `last_ids [N]` -> (float32 `[N, vocab]`, cache)."""
  n = last_ids.shape[0]
  logits, new_cache = tokens_to_logits(last_ids.astype(jnp.int32)[:, None], cache)
  if logits.ndim != 2 or logits.shape[0] != n:
    raise ValueError(f"tokens_to_logits must return logits of shape [{n}, vocab], got {logits.shape}")
  return logits.astype(jnp.float32), new_cache


def decode_loop(
    tokens_to_logits: TokensToLogits,
    cache: PyTree,
    pick: TokenPicker,
    *,
    batch_size: int,
    max_decode_len: int,
    eos_id: int = EOS_ID,
    max_lengths: jax.Array | None = None,
    start_ids: jax.Array | None = None,
) -> jax.Array:
  """One token per row per step, chosen by `pick`, until every row emitted EOS or `max_decode_len` tokens.

  EOS is forced at each row's `max_lengths` limit; a row emits `PAD_ID` after its EOS. The first step feeds each
  row its `start_ids` token (int `[batch_size]`, `start_tokens`; default `BOS_ID`).

  Returns:
    int32 `[batch_size, max_decode_len]`, without the leading BOS.
  """
  limits = row_limits(max_lengths, batch_size, max_decode_len)

  def not_done(state):
    step, _, _, done, _ = state
    return (step < max_decode_len) & ~jnp.all(done)

  def body(state):
    step, seqs, last, done, cache = state
    logits, cache = model_step(tokens_to_logits, last, cache)
    token = pick(logits, step).astype(jnp.int32)
    token = jnp.where(step + 1 >= limits, eos_id, token)
    token = jnp.where(done, PAD_ID, token)
    seqs = seqs.at[:, step].set(token)
    return step + 1, seqs, token, done | (token == eos_id), cache

  init = (
      jnp.int32(0),
      jnp.full((batch_size, max_decode_len), PAD_ID, jnp.int32),
      start_tokens(start_ids, batch_size),
      jnp.zeros((batch_size,), bool),
      cache,
  )
  return jax.lax.while_loop(not_done, body, init)[1]
