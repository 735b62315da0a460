"""`pallas_gpu`: JAX's Pallas GPU (Triton) flash attention, `jax.experimental.pallas.ops.gpu.attention.mha`.

Why this kernel: it ships with jax (maintained by the JAX team, importable on any machine, and it runs in the
Pallas interpreter on CPU, which is how the variant matrix checks it); forward and backward are both Pallas
(Triton) kernels, with segment ids and causal masking. `tokamax` (PyPI) has GPU kernels too, but pins its
own jax/flax and its API is still moving.

What it takes: self-attention over one segment-id array (the same array for queries and keys, so T == S;
equal ids attend, padding is id 0), causal masking by index (key j visible to query i iff j <= i), value
head_dim == query head_dim. What it does not: cross-attention (two segment-id arrays, or T != S), masking by
explicit positions (decode steps; packed training rows come without them), grouped-query heads (the registry
repeats them), a mask, a bias, dropout; `limits` and the registry refuse those and `auto` falls back. Lengths
are padded to whole blocks (padding: segment id 0). On a device mesh each device runs the kernel on its share of
the batch and heads (`jformer.attention.sharded`: `jit` does not partition a Pallas call by itself). On GPU,
float32 matmuls may run in TF32 (Triton's default precision). Where it has run: docs/results/support.md.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas.ops.gpu import attention as gpu_attention

from jformer.attention import sharded
from jformer.attention.registry import register, softmax_weights

# Triton tiles: powers of two of at least 16 rows; the interpreter takes any size.
_MIN_COMPILED_BLOCK = 16


def limits(query, key, value, *, q_segment_ids=None, kv_segment_ids=None, **masking) -> str | None:
  """Why the kernel cannot run this call (see the module doc), None if it can."""
  del masking
  if query.shape[1] != key.shape[1]:
    return (f"it takes one segment-id array for queries and keys, so self-attention only (T == S); got T="
            f"{query.shape[1]}, S={key.shape[1]}")
  if q_segment_ids is not kv_segment_ids:
    return ("it takes one segment-id array for queries and keys; this call passes two different arrays "
            "(cross-attention)")
  if value.shape[-1] != query.shape[-1]:
    return f"value head_dim {value.shape[-1]} must equal the query/key head_dim {query.shape[-1]}"
  return None


@register("pallas_gpu", supports={"causal", "segment_ids"}, weights=softmax_weights, platforms={"gpu"}, limits=limits,
          auto_priority=10, example_options=dict(block_q=4, block_k=4, block_backward=4))
def pallas_gpu(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
               kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, mesh=None,
               block_q=128, block_k=128, block_backward=32, interpret=None):
  """Pallas GPU (Triton) flash attention, fwd + bwd kernels; self-attention with segment ids, causal by index.

  Args:
    query, key, value `[B, T, H, D]` (the registry repeats grouped key/value heads), causal and the segment ids
    of the variant signature (`jformer/attention/__init__.py`); `limits` and the registry refuse the rest.
    block_q, block_k: forward tile sizes (options); block_backward: the tile of both backward kernels. Compiled,
      each is cut to the length rounded up to a power of two (at least 16).
    mesh: the mesh to run on, each device on its share of the batch and heads (`sharded.per_device`); None =
      one call over the whole arrays.
    interpret: run in the Pallas interpreter; None = unless JAX's backend is GPU.

  Returns:
    `[B, T, H, D]`.
  """
  del kv_segment_ids, q_positions, kv_positions, mask, bias, dropout_rate, dropout_rng  # see `limits`.
  if interpret is None:
    interpret = jax.default_backend() != "gpu"
  kernel = functools.partial(_pallas_gpu, causal=causal, tiles=(block_q, block_k, block_backward),
                             interpret=interpret)
  return sharded.per_device(kernel, query, key, value, q_segment_ids, mesh=mesh)


def _pallas_gpu(query, key, value, segment_ids, kv_segment_ids, *, causal: bool, tiles: tuple[int, int, int],
                interpret: bool) -> jax.Array:
  """The kernel on one device's arrays (shapes and arguments as `pallas_gpu`'s; one segment-id array)."""
  del kv_segment_ids  # None: the kernel takes one array for queries and keys (`limits`).
  batch, length, _, head_dim = query.shape
  if interpret:
    tiles = [min(b, length) for b in tiles]
  else:
    tiles = [min(b, max(_MIN_COMPILED_BLOCK, pl.next_power_of_2(length))) for b in tiles]
  pad = -length % math.lcm(*tiles)
  if segment_ids is not None or pad:  # padding (and the added tail) is id 0: no real query sees it.
    ids = jnp.ones((batch, length), jnp.int32) if segment_ids is None else jnp.broadcast_to(segment_ids,
                                                                                           (batch, length))
    segment_ids = jnp.pad(ids.astype(jnp.int32), ((0, 0), (0, pad)))
  q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (query, key, value))
  block_q, block_k, block_backward = tiles
  blocks = gpu_attention.BlockSizes(block_q=block_q, block_k=block_k, block_q_dkv=block_backward,
                                    block_kv_dkv=block_backward, block_q_dq=block_backward,
                                    block_kv_dq=block_backward)
  out = gpu_attention.mha(q, k, v, segment_ids, sm_scale=head_dim**-0.5, causal=causal, block_sizes=blocks,
                          interpret=interpret)
  return out[:, :length]
