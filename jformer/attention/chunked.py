"""`chunked`: memory-efficient attention in pure JAX, an online softmax over key chunks with a custom VJP."""

from __future__ import annotations

from jformer.attention import blockwise
from jformer.attention.registry import get, register, softmax_weights


@register("chunked", supports={"causal", "segment_ids", "positions", "mask", "bias", "decode", "gqa", "softcap",
                               "window"},
          weights=softmax_weights, example_options=dict(query_chunk_size=4, key_chunk_size=3))
def chunked(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
            kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, logits_softcap=0.0,
            window=None, query_chunk_size=256, key_chunk_size=512):
  """Memory-efficient softmax attention (online softmax over key chunks, custom VJP): memory linear in length.

  softmax(Q K^T / sqrt(d_k) + bias) V (paper eq. 1) computed `query_chunk_size` queries x `key_chunk_size`
  keys at a time (Rabe & Staats 2021; FlashAttention-2's algorithm, see `blockwise`), on any backend. The
  backward recomputes each block's probabilities from the saved logsumexp, so nothing of size T x S is kept.
  Blocks without a visible key (the causal future, outside a sliding `window`, other segments, padding, unfilled
  cache slots) are skipped: with a window the work is O(T * window).
  Lengths need not divide the chunk sizes (padded inside); a chunk is never longer than the sequence.

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0), the masking arguments,
    bias, logit soft-cap and window of the variant signature (`jformer/attention/__init__.py`); no dropout.
    query_chunk_size, key_chunk_size: options (`model.attention_options`), positive ints.

  Returns:
    `[B, T, H, Dv]`.
  """
  del dropout_rate, dropout_rng  # not declared: the registry refuses dropout before calling.
  return blockwise.attention(query, key, value, causal=causal, q_segment_ids=q_segment_ids,
                             kv_segment_ids=kv_segment_ids, q_positions=q_positions, kv_positions=kv_positions,
                             mask=mask, bias=bias, query_chunk_size=min(query_chunk_size, query.shape[1]),
                             key_chunk_size=min(key_chunk_size, key.shape[1]), softcap=logits_softcap,
                             window=window)


VARIANT = get("chunked")  # the registered entry, for `auto`.
