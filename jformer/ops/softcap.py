"""Logit soft-capping: cap * tanh(x / cap), a smooth bound to (-cap, cap) (Gemma 2: attention logits and final
logits). Near 0 it is the identity (slope 1); its slope at x is 1 - tanh(x / cap)^2."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def soft_cap(x: jax.Array, cap: float) -> jax.Array:
  """`cap * tanh(x / cap)` elementwise; `cap` 0 (or negative: not a cap) returns `x` unchanged."""
  if not cap or cap <= 0:
    return x
  return jnp.asarray(cap, x.dtype) * jnp.tanh(x / jnp.asarray(cap, x.dtype))
