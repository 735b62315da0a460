"""`dot_product`: the reference, softmax(Q K^T / sqrt(d_k)) V over the full mask."""

from __future__ import annotations

from jformer.attention.registry import get, register, softmax_weights
from jformer.ops.attention import dot_product_attention
from jformer.ops.masks import attention_mask


@register("dot_product",
          supports={"causal", "segment_ids", "positions", "mask", "bias", "dropout", "decode", "gqa", "softcap",
                    "window"},
          weights=softmax_weights)
def dot_product(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
                kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, logits_softcap=0.0,
                window=None):
  """Reference scaled dot-product attention (paper eq. 1), full [T, S] logits; soft-cap and window as options."""
  full_mask = attention_mask(query.shape[1], key.shape[1], causal=causal, q_segment_ids=q_segment_ids,
                             kv_segment_ids=kv_segment_ids, q_positions=q_positions,
                             kv_positions=kv_positions, mask=mask, window=window)
  return dot_product_attention(query, key, value, mask=full_mask, bias=bias, softcap=logits_softcap,
                               dropout_rate=dropout_rate, dropout_rng=dropout_rng)


VARIANT = get("dot_product")  # the registered entry, for `auto`.
