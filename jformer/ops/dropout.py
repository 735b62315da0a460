"""Dropout (Srivastava et al. 2014; paper Sec. 5.4) from 8 random bits per element.

Flax's dropout draws a float32 uniform per element: 32 threefry bits each, which on a CPU cost more than a
Transformer layer's elementwise work. Here each 32-bit draw decides four elements, comparing one byte each with
`round(rate * 256)`: the rate applied is the nearest multiple of 1/256 (0.1 -> 26/256 = 0.1016), and the kept
elements are scaled by the inverse of the kept fraction actually applied, so that E[dropout(x)] = x exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

LEVELS = 256  # one byte per element.


def applied_rate(rate: float) -> float:
  """The dropout rate `dropout` applies for `rate`: the nearest multiple of 1/256 (0 only for 0)."""
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"dropout rate {rate} is not in [0, 1)")
  return (max(1, round(rate * LEVELS)) if rate > 0 else 0) / LEVELS


def dropout(x: jax.Array, rate: float, key: jax.Array) -> jax.Array:
  """Zeroes each element of `x` (any shape) with probability `applied_rate(rate)`, scales the others by
  1 / (1 - that rate); `key` a jax.random key. Same shape and dtype as `x`."""
  threshold = round(applied_rate(rate) * LEVELS)
  if threshold == 0:
    return x
  words = jax.random.bits(key, (-(-x.size // 4),), jnp.uint32)
  bytes_ = jnp.concatenate([(words >> shift) & 0xFF for shift in (0, 8, 16, 24)])[:x.size].reshape(x.shape)
  keep = bytes_ >= threshold
  scale = jnp.asarray(LEVELS / (LEVELS - threshold), x.dtype)
  return jnp.where(keep, x * scale, jnp.zeros((), x.dtype))
