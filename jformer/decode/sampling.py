"""Ancestral sampling with temperature, top-k and nucleus (top-p) filtering."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.decode.common import NEG_INF, PyTree, TokensToLogits, decode_loop
from jformer.decode.greedy import greedy_search
from jformer.ops.tokens import EOS_ID


def filter_logits(logits: jax.Array, *, top_k: int = 0, top_p: float = 1.0) -> jax.Array:
  """Set to `NEG_INF` every logit outside the top-k tokens, then outside the nucleus of mass `top_p`.

  The nucleus is the smallest set of most probable tokens (of the top-k-filtered distribution) whose mass
  reaches `top_p`; it always holds the most probable token. Tokens tied with the last kept one are kept too.

  Args:
    logits: float `[..., vocab]`.
    top_k: static int; 0 (or >= vocab) keeps all tokens.
    top_p: static float in (0, 1]; 1.0 keeps all tokens.
  """
  _check_filter_args(top_k, top_p)
  if 0 < top_k < logits.shape[-1]:
    kth_best = jax.lax.top_k(logits, top_k)[0][..., -1:]
    logits = jnp.where(logits < kth_best, NEG_INF, logits)
  if top_p < 1.0:
    sorted_logits = -jnp.sort(-logits, axis=-1)  # descending
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    kept = mass_before < top_p  # always true for the best token
    threshold = jnp.min(jnp.where(kept, sorted_logits, jnp.inf), axis=-1, keepdims=True)
    logits = jnp.where(logits < threshold, NEG_INF, logits)
  return logits


def _check_filter_args(top_k: int, top_p: float) -> None:
  if top_k < 0:
    raise ValueError(f"top_k must be >= 0, got {top_k}")
  if not 0.0 < top_p <= 1.0:
    raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def _is_per_row(rng: jax.Array, batch_size: int) -> bool:
  """True if `rng` holds one key per row (`[B]` typed or `[B, 2]` raw keys), False for a single key."""
  key_ndim = jnp.ndim(rng) - (0 if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key) else 1)
  if key_ndim == 0:
    return False
  if key_ndim != 1 or rng.shape[0] != batch_size:
    raise ValueError(f"rng must be one PRNG key or one per row ({batch_size}), got shape {rng.shape}")
  return True


def sample(
    tokens_to_logits: TokensToLogits,
    cache: PyTree,
    rng: jax.Array,
    *,
    batch_size: int,
    max_decode_len: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    eos_id: int = EOS_ID,
    max_lengths: jax.Array | None = None,
    start_ids: jax.Array | None = None,
) -> jax.Array:
  """Sample each next token from softmax(filter_logits(logits / temperature)), until every row emitted EOS.

  Same loop as `greedy_search`, with a sampling token picker; the key of step t is `fold_in(rng, t)`. With one key
  per row, row b draws from `fold_in(rng[b], t)` alone, so its sample does not depend on the other rows (nor on
  how rows are batched or split across devices).

  Args:
    tokens_to_logits, cache, batch_size, max_decode_len, eos_id, max_lengths, start_ids: as in `greedy_search`.
    rng: a PRNG key, or one per row (`[B]` typed keys or `[B, 2]` raw `PRNGKey`s).
    temperature: static float >= 0; 0 is greedy search.
    top_k: static int; 0 is off.
    top_p: static float in (0, 1]; 1.0 is off.

  Returns:
    int32 `[B, max_decode_len]`, without the leading BOS, padded with 0 after EOS.
  """
  if temperature < 0:
    raise ValueError(f"temperature must be >= 0, got {temperature}")
  _check_filter_args(top_k, top_p)
  if temperature == 0:
    return greedy_search(tokens_to_logits, cache, batch_size=batch_size, max_decode_len=max_decode_len,
                         eos_id=eos_id, max_lengths=max_lengths, start_ids=start_ids)

  if rng is None:
    raise ValueError("sampling needs a PRNG key: pass rng (one key, or one per row)")
  per_row = _is_per_row(rng, batch_size)

  def pick(logits: jax.Array, step: jax.Array) -> jax.Array:
    logits = filter_logits(logits / temperature, top_k=top_k, top_p=top_p)
    if per_row:
      return jax.vmap(lambda key, row: jax.random.categorical(jax.random.fold_in(key, step), row))(rng, logits)
    return jax.random.categorical(jax.random.fold_in(rng, step), logits, axis=-1)

  return decode_loop(tokens_to_logits, cache, pick, batch_size=batch_size, max_decode_len=max_decode_len,
                     eos_id=eos_id, max_lengths=max_lengths, start_ids=start_ids)
