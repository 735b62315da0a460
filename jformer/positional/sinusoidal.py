"""`sinusoidal`: the paper's fixed encoding, added to the token embeddings (Vaswani et al. 2017, Sec. 3.5)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.ops import positional
from jformer.positional.registry import register


def _check(dims, options):
  if dims["d_model"] % 2:
    raise ValueError(f"sinusoidal positions need an even d_model (sin and cos alternate over its features), got "
                     f"{dims['d_model']}; pick an even model.d_model or another model.positional")
  if options["layout"] not in positional.SINUSOIDAL_LAYOUTS:
    raise ValueError(f"model.positional_options.layout='{options['layout']}' is not one of "
                     f"{list(positional.SINUSOIDAL_LAYOUTS)}")


@register("sinusoidal", acts="embedding", check=_check, example_options={"base": 1000.0, "layout": "halves"})
def sinusoidal(positions_BxL: jax.Array, *, dims, params, base: float = 10000.0,
               layout: str = "interleaved") -> jax.Array:
  """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...) added to embeddings (paper Sec. 3.5); `layout`
  "halves" puts the sines in the first half of the features, the cosines in the second (Marian)."""
  del params
  table_PxD = jnp.asarray(positional.sinusoidal(dims["max_length"], dims["d_model"], base=base, layout=layout))
  return jnp.take(table_PxD, positions_BxL, axis=0)
