"""`alibi`: attention with linear biases (ALiBi; Press et al. 2022): fixed per-head slopes m_h bias the
self-attention logits by -m_h |i - j| (bidirectional) or -m_h (i - j) (causal); no embedding, nothing learned."""

from __future__ import annotations

import jax

from jformer.ops import positional
from jformer.positional.registry import register


@register("alibi", acts="bias")
def alibi(q_positions_BxT: jax.Array, kv_positions_BxS: jax.Array, *, causal, dims, params) -> jax.Array:
  """ALiBi (Press et al. 2022): logits bias -m_h |i-j| (encoder) or -m_h (i-j) (decoder), fixed slopes m_h."""
  del params
  return positional.alibi_bias(positional.alibi_slopes(dims["heads"]), q_positions_BxT, kv_positions_BxS,
                               causal=causal)
