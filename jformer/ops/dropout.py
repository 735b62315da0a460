"""Dropout (Srivastava et al. 2014; paper Sec. 5.4) from a counter-based hash: one 32-bit draw per element.

Flax's dropout draws a float32 uniform per element from threefry (20 rounds per 64 bits), which on a CPU costs
more than a Transformer layer's elementwise work, and materializes the bits as an array. Here the key gives two
32-bit seeds (one threefry draw), and each element's draw is a hash of its flat index and the seeds: two rounds of
`lowbias32` (C. Wellons' integer hash, a bijection of 32-bit words with full avalanche). The draw is a handful of
integer operations that XLA fuses into the select that applies the mask: no random array is written. An element
is dropped when its draw is below `round(rate * 2^32)`: the rate applied is `rate` to 2^-32, and the kept elements
are scaled (in at least float32, then rounded to x's dtype) by the inverse of the kept fraction applied, so that
E[dropout(x)] = x to the rounding of x's dtype. Same key, same mask, on every backend: resuming a run replays its masks.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax

DRAWS = 2**32  # one 32-bit draw per element.


def applied_rate(rate: float) -> float:
  """The dropout rate `dropout` applies for `rate`: the nearest multiple of 2^-32 (0 only for 0)."""
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"dropout rate {rate} is not in [0, 1)")
  return (min(DRAWS - 1, max(1, round(rate * DRAWS))) if rate > 0 else 0) / DRAWS


def _lowbias32(h: jax.Array) -> jax.Array:
  """A bijection of uint32 words whose output bits each depend on every input bit (Wellons' `lowbias32`)."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x7FEB352D)
  h = h ^ (h >> 15)
  h = h * jnp.uint32(0x846CA68B)
  return h ^ (h >> 16)


def random_words(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """uint32 words of `shape`, one per element: a hash of the element's flat index under two seeds drawn from
  `key` (a jax.random key of any implementation). Distinct elements get distinct words for one key."""
  size = math.prod(shape)
  if size > DRAWS:
    raise ValueError(f"random_words draws one 32-bit word per element: {size} elements of {shape} exceed 2^32; "
                     "apply dropout to smaller pieces")
  seeds = jax.random.bits(key, (2,), jnp.uint32)
  index = lax.iota(jnp.uint32, size).reshape(shape)
  return _lowbias32(_lowbias32(index + seeds[0]) ^ seeds[1])


def dropout(x: jax.Array, rate: float, key: jax.Array) -> jax.Array:
  """Zeroes each element of `x` (any shape) with probability `applied_rate(rate)`, scales the others by
  1 / (1 - that rate); `key` a jax.random key. Same shape and dtype as `x`."""
  threshold = round(applied_rate(rate) * DRAWS)
  if threshold == 0:
    return x
  keep = random_words(key, x.shape) >= jnp.uint32(threshold)
  wide = x.astype(jnp.promote_types(x.dtype, jnp.float32))
  scaled = (wide * (DRAWS / (DRAWS - threshold))).astype(x.dtype)
  return jnp.where(keep, scaled, jnp.zeros((), x.dtype))
