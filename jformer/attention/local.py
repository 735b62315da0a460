"""`local`: sliding-window attention, computed on a band of blocks (memory O(T * window))."""

from __future__ import annotations

import jax.numpy as jnp

from jformer.attention import decode_state
from jformer.attention.registry import register, softmax_weights
from jformer.ops import masks
from jformer.ops.attention import dot_product_attention

# The default window: keys less than 256 positions away, so a sequence of at most 256 tokens is attended in full
# and only longer ones are restricted; set `model.attention_options.window_size` for the length you train at.
WINDOW_SIZE = 256


def local_weights(query, key, *, window_size: int = WINDOW_SIZE, causal=False, q_positions=None, kv_positions=None,
                  **masking):
  """Softmax attention weights `[B, H, T, S]` over the visible keys within the window: the explicit formula."""
  q_positions = jnp.arange(query.shape[1]) if q_positions is None else q_positions
  kv_positions = jnp.arange(key.shape[1]) if kv_positions is None else kv_positions
  window = masks.sliding_window_mask(q_positions, kv_positions, window_size, causal=causal)
  return softmax_weights(query, key, causal=causal, q_positions=q_positions, kv_positions=kv_positions,
                         **dict(masking, mask=window if masking.get("mask") is None else window & masking["mask"]))


@register("local", supports={"causal", "segment_ids", "positions", "decode", "gqa"}, weights=local_weights,
          example_options=dict(window_size=3), decode_state=decode_state.window("window_size"))
def local(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
          kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, window_size: int = WINDOW_SIZE):
  """Sliding-window attention: each query sees the keys less than `window_size` positions away (causal: before).

  softmax(Q K^T / sqrt(d_k)) V (paper eq. 1) with the visibility of the signature AND
  |position(i) - position(j)| < window_size (causal: 0 <= position(i) - position(j) < window_size), i.e. the
  reference with `ops.masks.sliding_window_mask` added (Beltagy et al. 2020; Child et al. 2019).

  Self-attention (T == S) runs on a band: the sequence is cut into blocks of `w = min(window_size, T)` tokens,
  and each block of queries attends to its own block and the blocks within reach of the window (the previous
  ones only when causal), so logits are `[B, H, T, (2r + 1) w]` (causal `(r + 1) w`), r = ceil((window-1)/w):
  memory and time O(T * window). The band is over token indices, so within a segment positions must step by
  one per token (as `arange` and packing produce). Decode steps and cross-attention (T != S) use the full
  `[T, S]` mask (T = 1 when decoding: O(S)).

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0), the masking arguments of the
    variant signature (`jformer/attention/__init__.py`); no mask, bias or dropout.
    window_size: the window (option), a positive int; default WINDOW_SIZE = 256 (`example_options` uses 3, so
      that the tests' short sequences exercise the band).

  Returns:
    `[B, T, H, Dv]`.
  """
  del mask, bias, dropout_rate, dropout_rng  # not declared: the registry refuses them before calling.
  batch, q_len = query.shape[:2]
  kv_len = key.shape[1]
  q_segment_ids, kv_segment_ids = _segments(q_segment_ids, kv_segment_ids, batch, q_len, kv_len)
  q_positions = jnp.broadcast_to(jnp.arange(q_len) if q_positions is None else q_positions, (batch, q_len))
  kv_positions = jnp.broadcast_to(jnp.arange(kv_len) if kv_positions is None else kv_positions, (batch, kv_len))
  if q_len != kv_len:
    return dot_product_attention(query, key, value, mask=_window_mask(
        q_segment_ids, kv_segment_ids, q_positions, kv_positions, window_size, causal))

  block = min(window_size, q_len)
  num_blocks = -(-q_len // block)
  reach = min(-(-(window_size - 1) // block), num_blocks - 1)  # neighbour blocks the window reaches, each side
  offsets = range(-reach, 1 if causal else reach + 1)
  pad = num_blocks * block - q_len

  def blocks(x_BxL):  # [B, L, ...] -> [B * n, w, ...]: the query blocks
    x_BxL = jnp.pad(x_BxL, [(0, 0), (0, pad)] + [(0, 0)] * (x_BxL.ndim - 2))
    return x_BxL.reshape(batch * num_blocks, block, *x_BxL.shape[2:])

  def band(x_BxL):  # [B, L, ...] -> [B * n, len(offsets) * w, ...]: the keys each query block may see
    x_BxL = jnp.pad(x_BxL, [(0, 0), (reach * block, pad + reach * block)] + [(0, 0)] * (x_BxL.ndim - 2))
    x_BxNxW = x_BxL.reshape(batch, num_blocks + 2 * reach, block, *x_BxL.shape[2:])
    x_BxNxC = jnp.concatenate([x_BxNxW[:, reach + o:reach + o + num_blocks] for o in offsets], axis=2)
    return x_BxNxC.reshape(batch * num_blocks, len(offsets) * block, *x_BxL.shape[2:])

  # Padding gets segment id 0, so padded keys are invisible.
  visible = _window_mask(blocks(q_segment_ids), band(kv_segment_ids), blocks(q_positions), band(kv_positions),
                         window_size, causal)
  out = dot_product_attention(blocks(query), band(key), band(value), mask=visible)
  return out.reshape(batch, num_blocks * block, *out.shape[2:])[:, :q_len]


def _segments(q_segment_ids, kv_segment_ids, batch: int, q_len: int, kv_len: int):
  """`[B, T]`, `[B, S]` segment ids (ones when not given: one example per row)."""
  if q_segment_ids is None:
    return jnp.ones((batch, q_len), jnp.int32), jnp.ones((batch, kv_len), jnp.int32)
  return (jnp.broadcast_to(q_segment_ids, (batch, q_len)).astype(jnp.int32),
          jnp.broadcast_to(kv_segment_ids, (batch, kv_len)).astype(jnp.int32))


def _window_mask(q_segment_ids, kv_segment_ids, q_positions, kv_positions, window_size: int, causal: bool):
  """`[B, 1, T, S]`: same non-zero segment and within the (causal) window."""
  return (masks.segment_mask(q_segment_ids, kv_segment_ids)
          & masks.sliding_window_mask(q_positions, kv_positions, window_size, causal=causal))
