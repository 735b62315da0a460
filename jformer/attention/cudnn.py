"""`cudnn`: cuDNN flash attention through `jax.nn.dot_product_attention(..., implementation="cudnn")`.

Why this kernel: it is JAX's own entry to NVIDIA's fused attention (forward and backward), shipped with jax and
importable anywhere; nothing else to install on a CUDA machine. It runs only on NVIDIA GPUs
(cuDNN): on any other backend the call is refused, so the variant matrix cannot check it on CPU; what does run
on CPU is tested (the translation of segment ids to lengths, the refusals).

How the request is expressed the way cuDNN takes it (jax's cuDNN path takes `is_causal`,
`query_seq_lengths`/`key_value_seq_lengths`, a bias and a boolean mask, which it turns into a dense additive
bias):
- causal: `is_causal` (index-aligned), for self-attention shapes (T == S) only;
- a window: `local_window_size`, with causal masking only (cuDNN's sliding window looks back: `left`);
- segment ids: as sequence lengths, which express one example per row followed by padding (right padding) and
  nothing else. Packed rows (several examples per row, the default `data.packing=True`) are not expressible
  this way; jax's API takes no per-segment offsets. The check runs in the graph: a batch with a row that is
  not "one example, then padding" gets a NaN output (so the non-finite stop halts the run, naming the step)
  instead of a wrong one. `auto` runs `cudnn` under a `lax.cond` on that same check, so packed batches take
  the next kernel there;
- not declared, so refused: explicit positions (decode steps), a mask or bias (cuDNN
  would take them only as a dense `[B, H, T, S]` bias with its own gradient constraints, which defeats the
  kernel), dropout (not exposed by `jax.nn`).
`limits`: bfloat16/float16 inputs, head_dim a multiple of 8 and at most 256 (128 before Hopper; jax raises
then), value head_dim == query head_dim. On a device mesh jax's cuDNN attention partitions itself (its
`custom_partitioning` rules split batch and heads like the query), so it needs no `jformer.attention.sharded`.
Where it has run: docs/results/support.md.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.attention.registry import register, softmax_weights

DTYPES = (jnp.bfloat16, jnp.float16)
MAX_HEAD_DIM = 256


def limits(query, key, value, *, causal=False, **masking) -> str | None:
  """Why cuDNN cannot run this call (see the module doc), None if it can."""
  if query.dtype not in DTYPES:
    return f"cuDNN flash attention takes bfloat16 or float16 inputs, got {query.dtype}"
  head_dim = query.shape[-1]
  if head_dim % 8 or head_dim > MAX_HEAD_DIM:
    return f"cuDNN needs a head_dim that is a multiple of 8 and at most {MAX_HEAD_DIM}, got {head_dim}"
  if value.shape[-1] != head_dim:
    return f"value head_dim {value.shape[-1]} must equal the query/key head_dim {head_dim}"
  if causal and query.shape[1] != key.shape[1]:
    return f"its causal mask is index-aligned for self-attention shapes only (T == S), got T={query.shape[1]}, " \
           f"S={key.shape[1]}"
  if masking.get("window") is not None and not causal:
    return "cuDNN takes a sliding window only with causal masking (a window that looks back)"
  return None


def padding_lengths(q_segment_ids: jax.Array, kv_segment_ids: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Segment ids `[B, T]`, `[B, S]` as cuDNN sequence lengths, and whether that says the same thing.

  Returns:
    (query lengths `[B]` int32, key/value lengths `[B]` int32, expressible: a bool scalar, True iff every row
    of both is one example (one non-zero id, the same in the query and key/value rows) followed by padding
    (id 0), with at least one key: then "position < length" sees exactly the keys the segment ids do).
  """
  q_lengths, kv_lengths = (jnp.sum(ids != 0, axis=1, dtype=jnp.int32) for ids in (q_segment_ids, kv_segment_ids))
  q_example, kv_example = q_segment_ids.max(axis=1), kv_segment_ids.max(axis=1)

  def right_padded(ids, lengths, example):
    return jnp.all(ids == jnp.where(jnp.arange(ids.shape[1]) < lengths[:, None], example[:, None], 0))

  expressible = (right_padded(q_segment_ids, q_lengths, q_example) & right_padded(kv_segment_ids, kv_lengths,
                                                                                   kv_example)
                 & jnp.all((kv_lengths > 0) & ((q_lengths == 0) | (q_example == kv_example))))
  return q_lengths, kv_lengths, expressible


@register("cudnn", supports={"causal", "segment_ids", "gqa", "window"}, weights=softmax_weights, platforms={"gpu"},
          limits=limits, auto_priority=20)
def cudnn(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
          kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, window=None):
  """cuDNN flash attention (NVIDIA GPUs): causal, causal window, right padding as lengths (packed rows: NaN), GQA.

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, D]` (H % K == 0), causal, the segment ids and
    the window (with causal) of the variant signature (`jformer/attention/__init__.py`); `limits` and the
    registry refuse the rest.

  Returns:
    `[B, T, H, D]`; all NaN when the segment ids are not right padding (`padding_lengths`).
  """
  del q_positions, kv_positions, mask, bias, dropout_rate, dropout_rng  # refused by the registry when given.
  if jax.default_backend() != "gpu":
    raise ValueError(f"attention variant 'cudnn' runs only on NVIDIA GPUs (cuDNN); JAX's backend is "
                     f"'{jax.default_backend()}'. Use 'auto', which picks the kernel for the backend.")
  local_window_size = None if window is None else (window[0], 0)  # causal (`limits`): the left side only.
  if q_segment_ids is None:
    return jax.nn.dot_product_attention(query, key, value, is_causal=causal, local_window_size=local_window_size,
                                        implementation="cudnn")
  q_lengths, kv_lengths, expressible = padding_lengths(*(jnp.broadcast_to(ids, (query.shape[0], x.shape[1]))
                                                         for ids, x in ((q_segment_ids, query), (kv_segment_ids, key))))
  out = jax.nn.dot_product_attention(query, key, value, is_causal=causal, query_seq_lengths=q_lengths,
                                     key_value_seq_lengths=kv_lengths, local_window_size=local_window_size,
                                     implementation="cudnn")
  return jnp.where(expressible, out, jnp.asarray(jnp.nan, out.dtype))
