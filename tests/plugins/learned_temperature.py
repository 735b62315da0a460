"""`learned_temperature`: softmax(exp(s_h) Q K^T / sqrt(d_k)) V, a learned logit scale per head.

A researcher's own attention variant with a learned parameter, in a file outside the jformer package: loaded
with `--config.imports=tests/plugins/learned_temperature.py` (tests/test_plugins.py; README "Add an attention
variant").
"""

import jax.numpy as jnp

from jformer.attention import register
from jformer.attention.registry import softmax_weights
from jformer.ops.attention import dot_product_attention
from jformer.ops.masks import attention_mask
from jformer.registry import Param, constant

# s_h, one per head, starting at 0: the variant starts as the paper's scaled dot product.
PARAMS = {"log_scale": Param(("heads",), constant(0.0))}


def _scaled(query, params):
  """exp(s_h) q, `[B, T, H, D]`."""
  return query * jnp.exp(params["log_scale"])[:, None].astype(query.dtype)


def weights(query, key, *, params, **masking):
  """The attention weights softmax(exp(s_h) q.k / sqrt(d_k) + bias) over the visible keys, `[B, H, T, S]`."""
  return softmax_weights(_scaled(query, params), key, **masking)


@register("learned_temperature", supports={"causal", "segment_ids", "positions", "mask", "bias", "decode", "gqa"},
          params=PARAMS, weights=weights)
def learned_temperature(query, key, value, *, params, causal=False, q_segment_ids=None, kv_segment_ids=None,
                        q_positions=None, kv_positions=None, mask=None, bias=None, dropout_rate=0.0,
                        dropout_rng=None):
  """Dot-product attention with a learned temperature per head: softmax(exp(s_h) Q K^T / sqrt(d_k) + bias) V."""
  del dropout_rate, dropout_rng  # not declared: the registry refuses dropout before calling.
  visible = attention_mask(query.shape[1], key.shape[1], causal=causal, q_segment_ids=q_segment_ids,
                           kv_segment_ids=kv_segment_ids, q_positions=q_positions, kv_positions=kv_positions,
                           mask=mask)
  return dot_product_attention(_scaled(query, params), key, value, mask=visible, bias=bias)
