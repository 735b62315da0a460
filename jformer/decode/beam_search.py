"""Beam search with the GNMT length penalty, as used by "Attention Is All You Need" (beam 4, alpha 0.6).

The alive/finished formulation of Tensor2Tensor and the Flax WMT example: each step takes the 2 * beam_size best
one-token extensions of the alive beams, so that even if beam_size of them end in EOS, beam_size others can stay
alive. The alive set keeps the best non-EOS extensions (by log-probability); the finished set keeps the best
EOS-ended hypotheses seen so far (by length-penalised score). Search stops early once no alive beam can beat the
worst finished one.

Beams are flattened beam-major inside each batch element: flat row `b * beam_size + k` is beam k of element b.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jformer.decode.common import (NEG_INF, PyTree, TokensToLogits, expand_cache, gather_cache_rows, model_step,
                                   row_limits, start_tokens)
from jformer.ops.tokens import EOS_ID


def length_penalty(length: jax.Array | int, alpha: float) -> jax.Array:
  """GNMT length penalty (Wu et al., 2016): `((5 + length) / 6) ** alpha`; a hypothesis scores log-prob / this."""
  return ((5.0 + jnp.asarray(length, jnp.float32)) / 6.0) ** alpha


class _BeamState(NamedTuple):
  step: jax.Array  # int32 scalar: tokens generated so far by every alive beam
  alive_seqs: jax.Array  # int32 [B, K, L + 1]; position 0 holds the start token (BOS)
  alive_log_probs: jax.Array  # float32 [B, K], sorted descending; <= NEG_INF / 2 means no beam
  finished_seqs: jax.Array  # int32 [B, K, L + 1]
  finished_scores: jax.Array  # float32 [B, K], sorted descending; NEG_INF for empty slots
  finished_flags: jax.Array  # bool [B, K]: slot holds a finished hypothesis
  cache: PyTree  # row-wise leaves have B * K rows


def _take_beams(x: jax.Array, beam_indices: jax.Array) -> jax.Array:
  """`x [B, M, ...]`, `beam_indices [B, K]` -> `[B, K, ...]`."""
  return x[jnp.arange(x.shape[0])[:, None], beam_indices]


def beam_search(
    tokens_to_logits: TokensToLogits,
    cache: PyTree,
    *,
    batch_size: int,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_decode_len: int,
    eos_id: int = EOS_ID,
    max_lengths: jax.Array | None = None,
    start_ids: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Beam search; jit-able, with static `batch_size`, `beam_size` and `max_decode_len`.

  Args:
    tokens_to_logits: the model step, see `jformer.decode.common`; it is called on `batch_size * beam_size` rows.
    cache: the model cache for `batch_size` rows; it is expanded to `batch_size * beam_size` rows here (expand the
      encoder output and source padding the model closes over with `flat_batch_beam_expand`).
    batch_size: number of batch elements B.
    beam_size: beams K per element.
    alpha: length-penalty exponent; the early-stopping bound holds for any sign of alpha.
    max_decode_len: static number of output positions L.
    eos_id: end-of-sequence id.
    max_lengths: optional int `[B]`: hypotheses of element b end in EOS at the latest as their `max_lengths[b]`-th
      token (EOS keeps its own log-probability there; every other token is excluded). Without it, hypotheses are
      cut at L.
    start_ids: optional int `[B]`: the token the beams of element b start from (default `BOS_ID`; see
      `greedy_search`).

  Returns:
    `(sequences, scores)`: int32 `[B, K, L]` without the leading BOS, each ending in EOS then 0s, and float32
    `[B, K]` = log-prob / length_penalty(length with EOS), both sorted best first. Slots beyond the number of
    finished hypotheses hold score `NEG_INF` and a sequence of 0s. An element with no finished hypothesis returns
    its alive beams instead (no EOS, scored log-prob / length_penalty(their length)).
  """
  B, K, L = batch_size, beam_size, max_decode_len
  limits = row_limits(max_lengths, B, L)
  longest = jnp.minimum(limits, L)  # the longest hypothesis each element can still produce

  def not_done(s: _BeamState) -> jax.Array:
    best_alive = s.alive_log_probs[:, 0]
    # Log-probs only fall as a hypothesis grows, and its length lies in [step + 1, longest]: with log-prob <= 0
    # the best reachable score is best_alive / max(lp) over that range (the longest length for alpha >= 0).
    best_reachable = best_alive / jnp.maximum(length_penalty(s.step + 1, alpha), length_penalty(longest, alpha))
    worst_finished = jnp.min(s.finished_scores, axis=1)
    done = (best_alive <= NEG_INF / 2) | (jnp.all(s.finished_flags, axis=1) & (worst_finished >= best_reachable))
    return (s.step < L) & ~jnp.all(done)

  def body(s: _BeamState) -> _BeamState:
    i = s.step
    logits, cache = model_step(tokens_to_logits, s.alive_seqs[:, :, i].reshape(B * K), s.cache)
    V = logits.shape[-1]
    if V < 2:
      raise ValueError(f"beam search needs a vocabulary of at least 2 tokens, got {V}")
    log_probs = jax.nn.log_softmax(logits).reshape(B, K, V)
    forced = (i + 1 >= limits)[:, None, None] & (jnp.arange(V) != eos_id)
    log_probs = jnp.where(forced, NEG_INF, log_probs)

    # The 2K best one-token extensions of the alive beams.
    candidates = (s.alive_log_probs[:, :, None] + log_probs).reshape(B, K * V)
    top_log_probs, top_indices = jax.lax.top_k(candidates, 2 * K)
    parents, tokens = top_indices // V, top_indices % V
    top_seqs = _take_beams(s.alive_seqs, parents).at[:, :, i + 1].set(tokens)
    ended = tokens == eos_id

    # Alive: the K best extensions that did not end.
    alive_log_probs, alive_pick = jax.lax.top_k(jnp.where(ended, NEG_INF, top_log_probs), K)
    alive_seqs = _take_beams(top_seqs, alive_pick)
    rows = (jnp.arange(B)[:, None] * K + _take_beams(parents, alive_pick)).reshape(B * K)
    cache = gather_cache_rows(cache, rows)

    # Finished: the K best of the old finished hypotheses and the extensions that ended.
    new_flags = ended & (top_log_probs > NEG_INF / 2)
    new_scores = jnp.where(new_flags, top_log_probs / length_penalty(i + 1, alpha), NEG_INF)
    finished_scores, finished_pick = jax.lax.top_k(jnp.concatenate([s.finished_scores, new_scores], axis=1), K)
    finished_seqs = _take_beams(jnp.concatenate([s.finished_seqs, top_seqs], axis=1), finished_pick)
    finished_flags = _take_beams(jnp.concatenate([s.finished_flags, new_flags], axis=1), finished_pick)

    return _BeamState(i + 1, alive_seqs, alive_log_probs, finished_seqs, finished_scores, finished_flags, cache)

  init = _BeamState(
      step=jnp.int32(0),
      alive_seqs=jnp.zeros((B, K, L + 1), jnp.int32).at[:, :, 0].set(start_tokens(start_ids, B)[:, None]),
      # Only beam 0 is live at first, so the K beams do not start as K copies of the same hypothesis.
      alive_log_probs=jnp.tile(jnp.array([0.0] + [NEG_INF] * (K - 1), jnp.float32), (B, 1)),
      finished_seqs=jnp.zeros((B, K, L + 1), jnp.int32),
      finished_scores=jnp.full((B, K), NEG_INF, jnp.float32),
      finished_flags=jnp.zeros((B, K), bool),
      cache=expand_cache(cache, K),
  )
  s = jax.lax.while_loop(not_done, body, init)

  any_finished = jnp.any(s.finished_flags, axis=1)
  sequences = jnp.where(any_finished[:, None, None], s.finished_seqs, s.alive_seqs)
  scores = jnp.where(any_finished[:, None], s.finished_scores, s.alive_log_probs / length_penalty(s.step, alpha))
  return sequences[:, :, 1:], scores
