"""`differential`: differential attention (Ye et al. 2024, "Differential Transformer"), the difference of two softmax
maps, which cancels the attention both give to irrelevant keys.

Each query and key head is split along head_dim into halves, Q = [Q1 | Q2] and K = [K1 | K2] (d = head_dim / 2 each,
the paper's [Q1; Q2] = X W^Q), and the values keep the whole head (the paper's V of width 2d):

    DiffAttn(X) = (softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d))) V                 (eq. 1)
    lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init
    head = (1 - lambda_init) RMSNorm(DiffAttn(X))        (per head over its value features: the paper's GroupNorm)

lambda_q = [lambda_q1 | lambda_q2] and lambda_k = [lambda_k1 | lambda_k2] are learned vectors of head_dim entries
shared by the layer's heads (N(0, 0.1^2) at initialisation, as the paper's code). The paper sets lambda_init by the
layer's depth l (1-based), `lambda_init_at(l)` = 0.8 - 0.6 exp(-0.3 (l - 1)); the attention call does not know its
layer, so lambda_init is an option (default 0.8, the schedule's value deep in the stack; the paper's ablation finds
its results robust to a constant one), and `depth_schedule(num_layers)` gives the layer kinds that set it per layer:

    model.layer_kinds, model.layer_pattern = differential.depth_schedule(model.num_decoder_layers)

The RMSNorm has no learned scale: the output projection W^O after it absorbs any per-feature scale.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jformer.attention import auto
from jformer.attention.registry import register, softmax_weights
from jformer.registry import Param

# The learned vectors of lambda, [lambda_*1 | lambda_*2] of head_dim entries, shared by the heads of a layer.
PARAMS = {name: Param(("head_dim",), jax.nn.initializers.normal(0.1)) for name in ("lambda_q", "lambda_k")}
LAMBDA_INIT = 0.8
NORM_EPSILON = 1e-5  # the paper's RMSNorm (its code's eps).


def lambda_init_at(layer: int) -> float:
  """lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)) of layer l, counted from 1 (the paper's schedule over depth)."""
  if not isinstance(layer, int) or layer < 1:
    raise ValueError(f"lambda_init_at counts layers from 1, got {layer!r}")
  return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


def depth_schedule(num_layers: int, **attention_options) -> tuple[dict, tuple]:
  """(`model.layer_kinds`, `model.layer_pattern`) of `num_layers` differential layers, layer i (from 0) of each
  stack with lambda_init = `lambda_init_at(i + 1)` (kinds `differential_1` ... `differential_<num_layers>`), and
  `attention_options` (the variant's others) in each."""
  if not isinstance(num_layers, int) or num_layers < 1:
    raise ValueError(f"depth_schedule needs a positive number of layers, got {num_layers!r}")
  kinds = {f"differential_{l}": {"attention": "differential",
                                 "attention_options": {**attention_options, "lambda_init": lambda_init_at(l)}}
           for l in range(1, num_layers + 1)}
  return kinds, tuple(kinds)


def _halves(x: jax.Array) -> list[jax.Array]:
  """`[..., D]` -> its two halves `[..., D / 2]` along the last axis (Q1, Q2; K1, K2; lambda_*1, lambda_*2)."""
  return jnp.split(x, 2, axis=-1)


def _lambda(params, lambda_init: float) -> jax.Array:
  """lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init, a float32 scalar."""
  (q1, q2), (k1, k2) = (_halves(params[name].astype(jnp.float32)) for name in ("lambda_q", "lambda_k"))
  return jnp.exp(q1 @ k1) - jnp.exp(q2 @ k2) + lambda_init


def _heads_out(diff_BxTxHxV: jax.Array, lambda_init: float) -> jax.Array:
  """(1 - lambda_init) RMSNorm(x) over each head's value features, float32 `[B, T, H, Dv]`."""
  x = diff_BxTxHxV.astype(jnp.float32)
  return (1.0 - lambda_init) * x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + NORM_EPSILON)


def differential_weights(query, key, *, params, lambda_init: float = LAMBDA_INIT, **masking) -> jax.Array:
  """The differential map softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d)) over the visible keys,
  `[B, H, T, S]` float32 (rows sum to 1 - lambda; entries may be negative): what the heads apply to the values."""
  (q1, q2), (k1, k2) = _halves(query), _halves(key)
  return softmax_weights(q1, k1, **masking) - _lambda(params, lambda_init) * softmax_weights(q2, k2, **masking)


def differential_reference(query, key, value, *, params, lambda_init: float = LAMBDA_INIT, dropout_rate=0.0,
                           dropout_rng=None, **masking) -> jax.Array:
  """The explicit formula: (1 - lambda_init) RMSNorm(`differential_weights` V), `[B, T, H, Dv]` in the query dtype."""
  del dropout_rate, dropout_rng  # the weights before dropout.
  weights_BxHxTxS = differential_weights(query, key, params=params, lambda_init=lambda_init, **masking)
  diff_BxTxHxV = jnp.einsum("bhts,bshd->bthd", weights_BxHxTxS, value.astype(jnp.float32))
  return _heads_out(diff_BxTxHxV, lambda_init).astype(query.dtype)


def _limits(query, key, value, **masking) -> str | None:
  """Why a call cannot be split into halves: an odd head_dim."""
  del key, value, masking
  if query.shape[-1] % 2:
    return (f"differential attention splits each query and key head into two halves, so head_dim must be even, "
            f"got {query.shape[-1]}")
  return None


@register("differential", supports={"causal", "segment_ids", "positions", "mask", "bias", "dropout", "decode", "gqa",
                                    "softcap", "window"},
          params=PARAMS, weights=differential_weights, reference=differential_reference, limits=_limits,
          splits_sequence=True)
def differential(query, key, value, *, params, mesh=None, lambda_init: float = LAMBDA_INIT, **masking):
  """Differential attention (Ye et al. 2024, eq. 1): (softmax(Q1 K1^T/sqrt(d)) - lambda softmax(Q2 K2^T/sqrt(d))) V.

  Q1, Q2 (K1, K2) the halves of each query (key) head along head_dim, d = head_dim / 2; V the whole value head;
  each head's output then RMS-normalised and scaled by (1 - lambda_init) (module doc). The two maps run as two
  calls of `auto` on the halves with the call's masking, bias, soft-cap and window (a library kernel where one
  takes them, else chunked or dot_product; `mesh` passed on, as `local` does), so memory is what `auto`'s is.
  Dropout drops the same entries of both maps (one key): the dropout of the differential map.

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0, D even), params {"lambda_q",
    "lambda_k": [D]}, the masking arguments of the variant signature (`jformer/attention/__init__.py`); `mesh`: as
    `auto`'s. lambda_init: option, a number (default 0.8; `lambda_init_at(l)` for layer l).

  Returns:
    `[B, T, H, Dv]` in the query dtype.
  """
  (q1, q2), (k1, k2) = _halves(query), _halves(key)
  attend = lambda q, k: auto.VARIANT.fn(q, k, value, **masking, mesh=mesh).astype(jnp.float32)
  diff_BxTxHxV = attend(q1, k1) - _lambda(params, lambda_init) * attend(q2, k2)
  return _heads_out(diff_BxTxHxV, lambda_init).astype(query.dtype)
