"""`learned`: a learned `[max_length, d_model]` table of absolute position embeddings, added to the token
embeddings (the paper's Table 3 row (E): nearly identical results to sinusoids; Gehring et al. 2017)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.positional.registry import register
from jformer.registry import Param

TABLE = Param(("max_length", "d_model"), jax.nn.initializers.normal(stddev=0.02), axes=("positions", "embed"))


@register("learned", acts="embedding", params={"position_embedding": TABLE})
def learned(positions_BxL: jax.Array, *, dims, params) -> jax.Array:
  """Learned absolute position embeddings, a [max_length, d_model] table (paper Table 3 (E)), added."""
  del dims
  return jnp.take(params["position_embedding"], positions_BxL, axis=0)
