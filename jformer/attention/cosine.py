"""`cosine`: cosine-similarity attention with a learned per-head temperature (Henry et al. 2020; Swin v2)."""

from __future__ import annotations

import math

import jax.numpy as jnp

from jformer.attention import scored
from jformer.attention.registry import register
from jformer.registry import Param, constant

# log tau per head, starting at tau = 10 and capped at tau = 100 (Swin Transformer v2, Liu et al. 2022).
PARAMS = {"log_temperature": Param(("heads",), constant(math.log(10.0)))}
MAX_LOG_TEMPERATURE = math.log(100.0)


def _unit(x):
  x = x.astype(jnp.float32)
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-6)


def project(query, key, params):
  """tau_h q / |q| and k / |k| (float32), so that the plain inner product is tau_h cos(q, k)."""
  temperature_H = jnp.exp(jnp.minimum(params["log_temperature"], MAX_LOG_TEMPERATURE))
  return _unit(query) * temperature_H[:, None], _unit(key), None


@register("cosine", supports=scored.FEATURES, params=PARAMS, weights=scored.weights(project, scored.dot),
          example_options=dict(query_chunk_size=4, key_chunk_size=3))
def cosine(query, key, value, *, params, query_chunk_size: int = 256, key_chunk_size: int = 512, **masking):
  """Cosine attention: softmax(tau_h cos(q, k) + bias) V, bounded logits with a learned temperature per head.

  The dot product q . k = |q||k| cos(q, k) is a similarity that grows with the norms; cosine attention keeps the
  angle only and learns the sharpness tau_h = exp(log_temperature_h) (capped at 100). Scaling q or k changes
  nothing. Computed chunk by chunk (`scored`): memory linear in length.

  Arguments (the variant signature, `params` as PARAMS declares, the chunk sizes as options) and result
  `[B, T, H, Dv]`: as every similarity variant's, see `scored.attention`.
  """
  return scored.attention(project, scored.dot, query, key, value, params=params, query_chunk_size=query_chunk_size,
                          key_chunk_size=key_chunk_size, **masking)
