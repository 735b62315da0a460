"""`relative`: T5's relative position bias (Raffel et al. 2020, Sec. 2.1): a learned scalar per head and bucket of
the key-minus-query distance, added to the self-attention logits; one `[num_buckets, heads]` table per stack,
shared by its layers (the stack's `position_bias` module holds it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.ops import positional
from jformer.positional.registry import register
from jformer.registry import Param


def _t5_init(key, shape, dtype=jnp.float32):
  """T5 (t5x) initialises its table with std 1/sqrt(num_buckets)."""
  return jax.nn.initializers.normal(stddev=shape[0]**-0.5)(key, shape, dtype)


def _check(dims, options):
  del dims
  num_buckets, max_distance = options["num_buckets"], options["max_distance"]
  if num_buckets < 4 or max_distance <= num_buckets // 2:
    raise ValueError(f"relative positions need num_buckets >= 4 and max_distance > num_buckets / 2 (half of a "
                     f"side's buckets are exact distances), got num_buckets={num_buckets}, max_distance="
                     f"{max_distance}; set model.positional_options.num_buckets / .max_distance")


TABLE = Param(("num_buckets", "heads"), _t5_init, axes=("buckets", "heads"))


@register("relative", acts="bias", params={"relative_embedding": TABLE}, check=_check,
          example_options={"num_buckets": 8, "max_distance": 16})
def relative(q_positions_BxT: jax.Array, kv_positions_BxS: jax.Array, *, causal, dims, params,
             num_buckets: int = 32, max_distance: int = 128) -> jax.Array:
  """T5 relative position bias b_h(bucket(j - i)), a learned [num_buckets, heads] table per stack (Raffel et al.)."""
  del dims
  buckets_BxTxS = positional.relative_position_buckets(
      positional.relative_positions(q_positions_BxT, kv_positions_BxS), bidirectional=not causal,
      num_buckets=num_buckets, max_distance=max_distance)
  return jnp.moveaxis(jnp.take(params["relative_embedding"], buckets_BxTxS, axis=0), -1, 1)
