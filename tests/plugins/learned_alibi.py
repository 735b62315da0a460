"""`learned_alibi`: ALiBi's linear biases (Press et al. 2022) with a slope learned per head, as a flex variant.

The logits minus m_h |i - j|, m_h = exp(s_h) > 0 learned, s_h starting at the log of ALiBi's fixed slopes, so the
variant starts as ALiBi (use it with `model.positional=none`). A researcher's plug-in outside the package:
`--config.imports=tests/plugins/learned_alibi.py --config.model.attention=learned_alibi`.
"""

import jax.numpy as jnp

from jformer.attention import flex
from jformer.ops.positional import alibi_slopes
from jformer.registry import Param


def log_alibi_slopes(key, shape, dtype=jnp.float32):
  """s_h = log m_h, ALiBi's fixed slopes (`ops.positional.alibi_slopes`): the variant starts as ALiBi."""
  del key
  return jnp.log(alibi_slopes(shape[0])).astype(dtype)


def learned_alibi(score, b, h, q_idx, kv_idx, *, params):
  """ALiBi with a learned slope per head: the logits minus exp(s_h) |i - j|."""
  return score - jnp.exp(params["log_slope"])[h] * jnp.abs(q_idx - kv_idx)


flex.register("learned_alibi", score_mod=learned_alibi, params={"log_slope": Param(("heads",), log_alibi_slopes)})
