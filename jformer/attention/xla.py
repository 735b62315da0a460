"""`xla`: `jax.nn.dot_product_attention` with its default implementation (XLA; cuDNN is not requested)."""

from __future__ import annotations

import jax

from jformer.attention.registry import register, softmax_weights
from jformer.ops.masks import attention_mask


@register("xla", supports={"causal", "segment_ids", "positions", "mask", "bias", "decode", "gqa", "window"},
          weights=softmax_weights)
def xla(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
        kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, window=None):
  """jax.nn.dot_product_attention, XLA's implementation (cuDNN is not requested); no dropout.

  Causal masking and a window by index (positions not given, T == S) go as `is_causal` and `local_window_size`;
  by explicit positions, in the mask."""
  del dropout_rate, dropout_rng  # not declared: the registry refuses dropout before calling.
  by_index = q_positions is None and kv_positions is None and query.shape[1] == key.shape[1]
  full_mask = attention_mask(query.shape[1], key.shape[1], causal=causal and not by_index,
                             q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids,
                             q_positions=q_positions, kv_positions=kv_positions, mask=mask,
                             window=None if by_index else window)
  return jax.nn.dot_product_attention(query, key, value, bias=bias, mask=full_mask, is_causal=causal and by_index,
                                      local_window_size=window if by_index else None)
