"""Boolean attention masks, broadcastable to `[B, H, T, S]`; True = the query may attend to the key.

Every mask here has shape `[B, 1, T, S]` (or `[1, 1, T, S]` without a batch), so masks combine with `&`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.ops.tokens import PAD_ID


def causal_mask(q_positions: jax.Array, kv_positions: jax.Array | None = None) -> jax.Array:
  """Key j is visible to query i iff position(j) <= position(i) (decoder self-attention, paper Sec. 3.2.3).

  Args:
    q_positions: `[B, T]` (or `[T]`) integer positions of the queries; an int `length` means `arange(length)`.
    kv_positions: `[B, S]` (or `[S]`) positions of the keys; defaults to `q_positions`.

  Returns:
    `[B, 1, T, S]` (`[1, 1, T, S]` for 1-D positions).
  """
  q_pos = _as_positions(q_positions)
  kv_pos = q_pos if kv_positions is None else _as_positions(kv_positions)
  return kv_pos[:, None, None, :] <= q_pos[:, None, :, None]


def padding_mask(q_tokens: jax.Array, kv_tokens: jax.Array | None = None, pad_id: int = PAD_ID) -> jax.Array:
  """Mask out padding: query i may attend key j iff both tokens are not `pad_id`.

  Args:
    q_tokens: `[B, T]` token ids.
    kv_tokens: `[B, S]` token ids; defaults to `q_tokens` (self-attention).

  Returns:
    `[B, 1, T, S]`.
  """
  kv_tokens = q_tokens if kv_tokens is None else kv_tokens
  return (q_tokens != pad_id)[:, None, :, None] & (kv_tokens != pad_id)[:, None, None, :]


def segment_mask(q_segment_ids: jax.Array, kv_segment_ids: jax.Array | None = None) -> jax.Array:
  """Packed sequences: query i may attend key j iff they belong to the same non-zero segment.

  Segment id 0 marks padding, so this mask is also the padding mask of unpacked rows (ids = tokens != 0).

  Args:
    q_segment_ids: `[B, T]` ints.
    kv_segment_ids: `[B, S]` ints; defaults to `q_segment_ids`.

  Returns:
    `[B, 1, T, S]`.
  """
  kv_segment_ids = q_segment_ids if kv_segment_ids is None else kv_segment_ids
  same = q_segment_ids[:, None, :, None] == kv_segment_ids[:, None, None, :]
  return same & (kv_segment_ids != 0)[:, None, None, :]


def window_mask(q_positions: jax.Array, kv_positions: jax.Array | None, window: tuple[int, int]) -> jax.Array:
  """Sliding window: key j is visible to query i iff position(i) - left <= position(j) <= position(i) + right.

  `window = (left, right)`, the keys seen before and after a query (Longformer, Beltagy et al. 2020; Mistral;
  Gemma 2); with causal masking only `left` matters. `local` attention of window size w is (w - 1, w - 1), the
  convention of `jax.nn.dot_product_attention(local_window_size=)` and splash's `LocalMask`.

  Args:
    q_positions: `[B, T]` (or `[T]`, or an int length for `arange`).
    kv_positions: `[B, S]` (or `[S]`, or an int length); defaults to `q_positions`.
    window: (left, right), ints >= 0 ((0, 0): each query sees only its own position).

  Returns:
    `[B, 1, T, S]` (`[1, 1, T, S]` for 1-D positions).
  """
  q_pos = _as_positions(q_positions)
  kv_pos = q_pos if kv_positions is None else _as_positions(kv_positions)
  return _in_window(q_pos[:, None, :, None], kv_pos[:, None, None, :], window)


def _in_window(q_pos, kv_pos, window: tuple[int, int]) -> jax.Array:
  left, right = window
  return (kv_pos >= q_pos - left) & (kv_pos <= q_pos + right)


def visible_keys(q_segment_ids: jax.Array, kv_segment_ids: jax.Array, q_positions: jax.Array | None = None,
                 kv_positions: jax.Array | None = None, *, causal: bool = True,
                 window: tuple[int, int] | None = None) -> jax.Array:
  """The rule of `attention_mask` for per-token arrays with any leading dims (blocks, kernels).

  Key j is visible to query i iff the segments match and are non-zero, and, when positions are given,
  position(j) <= position(i) (if `causal`) and position(j) is within `window` of position(i) (if given,
  `window_mask`).

  Args:
    q_segment_ids: `[..., T]` ints; kv_segment_ids: `[..., S]`.
    q_positions, kv_positions: `[..., T]`, `[..., S]`, or None for no rule by position.
    causal, window: the rules by position (read only when positions are given).

  Returns:
    `[..., T, S]` boolean.
  """
  kv_segments = kv_segment_ids[..., None, :]
  visible = (q_segment_ids[..., :, None] == kv_segments) & (kv_segments != 0)
  if q_positions is not None:
    q_pos, kv_pos = q_positions[..., :, None], kv_positions[..., None, :]
    if causal:
      visible = visible & (kv_pos <= q_pos)
    if window is not None:
      visible = visible & _in_window(q_pos, kv_pos, window)
  return visible


def segment_positions(segment_ids_BxL: jax.Array) -> jax.Array:
  """Each token's position in its own example of a packed row: its index minus that of the first token of its run
  of equal segment ids (examples are contiguous in a row, `jformer.data` packing), `[B, L]` int32."""
  ids = jnp.asarray(segment_ids_BxL)
  index = jnp.broadcast_to(jnp.arange(ids.shape[1], dtype=jnp.int32), ids.shape)
  starts = jnp.concatenate([jnp.ones_like(ids[:, :1], bool), ids[:, 1:] != ids[:, :-1]], axis=1)
  return index - jax.lax.cummax(jnp.where(starts, index, 0), axis=1)


def combine_masks(*masks: jax.Array | None) -> jax.Array | None:
  """Logical AND of the given masks (None entries are ignored); None when all are None."""
  present = [m for m in masks if m is not None]
  if not present:
    return None
  combined = present[0]
  for m in present[1:]:
    combined = combined & m
  return combined


def _as_positions(positions) -> jax.Array:
  if isinstance(positions, int):
    positions = jnp.arange(positions)
  positions = jnp.asarray(positions)
  return positions[None, :] if positions.ndim == 1 else positions


def attention_mask(
    q_len: int,
    kv_len: int,
    *,
    causal: bool = False,
    q_segment_ids: jax.Array | None = None,
    kv_segment_ids: jax.Array | None = None,
    q_positions: jax.Array | None = None,
    kv_positions: jax.Array | None = None,
    mask: jax.Array | None = None,
    window: tuple[int, int] | None = None,
) -> jax.Array | None:
  """The full boolean mask that the attention-variant arguments describe (see `jformer.attention`).

  Key j is visible to query i iff segments match and are non-zero (when segment ids are given), position(j)
  <= position(i) (when `causal`; positions default to `arange`), position(j) is within `window` of position(i)
  (when given, `window_mask`), and `mask` allows it (when given).

  Returns:
    `[B or 1, 1 or H, T, S]` boolean, or None when nothing is masked.
  """
  segments = None
  if q_segment_ids is not None or kv_segment_ids is not None:
    if q_segment_ids is None or kv_segment_ids is None:
      raise ValueError("q_segment_ids and kv_segment_ids must be given together")
    segments = segment_mask(q_segment_ids, kv_segment_ids)
  q_pos, kv_pos = q_len if q_positions is None else q_positions, kv_len if kv_positions is None else kv_positions
  causal_part = causal_mask(q_pos, kv_pos) if causal else None
  window_part = window_mask(q_pos, kv_pos, window) if window is not None else None
  return combine_masks(segments, causal_part, window_part, mask)
