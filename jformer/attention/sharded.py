"""Library kernels on a device mesh: each device runs the kernel on its own share of the batch and the heads.

XLA's SPMD partitioner does not split a Pallas call (`splash`, `pallas_gpu`) the way it splits ordinary ops: under
`jit` over a mesh its operands are gathered and each device computes the whole attention. `per_device` runs the
kernel under `jax.shard_map` instead (as MaxText does for splash): batch over the mesh axes the logical axis
"batch" maps to, query heads over those of "heads", key/value heads over those of "kv_heads", segment ids `[B, L]`
with the batch. The mesh and its rules come as an argument, a `jformer.axes.Placement` that the model holds and
passes to the attention call (`mesh=`); with none (one device, or pmap) the kernel is called as it is.

A dimension that the product of its mesh axes does not divide is not split over them (those devices compute the
same part). Key/value heads go with the query heads they serve: when "kv_heads" cannot be split as "heads" is
(e.g. 1 key/value head on 2 tensor devices), they are repeated to one per query head first. `cudnn` does not need
this: jax's cuDNN attention carries its own partitioning rules (`custom_partitioning`, batch and heads).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from jformer import axes
from jformer.ops.attention import repeat_kv


def per_device(kernel: Callable, query, key, value, q_segment_ids=None, kv_segment_ids=None, *,
               mesh: axes.Placement | None) -> jax.Array:
  """`kernel(query, key, value, q_segment_ids, kv_segment_ids)`, run on each device's share (module doc).

  Args:
    kernel: the per-device attention: query `[b, T, h, D]`, key/value `[b, S, k, D]`/`[b, S, k, Dv]`, segment
      ids `[b, T]`/`[b, S]` int or None (as given) -> `[b, T, h, Dv]`, b, h and k this device's share.
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0); segment ids broadcastable to
      `[B, T]` and `[B, S]`, or None.
    mesh: the mesh and rules to split over; None = call the kernel as it is.

  Returns:
    `[B, T, H, Dv]`, laid out over the mesh like the query.
  """
  batch = query.shape[0]
  if mesh is None:
    return kernel(query, key, value, q_segment_ids, kv_segment_ids)
  batch_axes, heads_axes, key, value = shares(mesh, query, key, value)
  if not batch_axes and not heads_axes:
    return kernel(query, key, value, q_segment_ids, kv_segment_ids)
  given = {name: jnp.broadcast_to(ids, (batch, x.shape[1])) for name, ids, x in
           (("q_segment_ids", q_segment_ids, query), ("kv_segment_ids", kv_segment_ids, key)) if ids is not None}

  def local(query, key, value, ids):
    return kernel(query, key, value, ids.get("q_segment_ids"), ids.get("kv_segment_ids"))

  heads = PartitionSpec(batch_axes or None, None, heads_axes or None, None)
  rows = PartitionSpec(batch_axes or None, None)
  return jax.shard_map(local, mesh=mesh.mesh, in_specs=(heads, heads, heads, {name: rows for name in given}),
                       out_specs=heads, axis_names=free_axes(mesh), check_vma=False)(query, key, value, given)


def shares(mesh: axes.Placement, query, key, value):
  """(the mesh axes the batch splits over, those the query heads split over, key, value): key/value `[B, S, K, D]`
  repeated to one head per query head when their heads cannot split as the query's (module doc)."""
  batch_axes = mesh.mesh_axes(axes.BATCH, query.shape[0])
  heads_axes = mesh.mesh_axes(axes.HEADS, query.shape[2])
  if mesh.mesh_axes(axes.KV_HEADS, key.shape[2]) != heads_axes:
    key, value = (repeat_kv(x, query.shape[2]) for x in (key, value))
  return batch_axes, heads_axes, key, value


def free_axes(mesh: axes.Placement) -> frozenset:
  """The mesh axes not yet manual (those a `jax.shard_map` here maps over)."""
  return frozenset(mesh.mesh.axis_names) - frozenset(jax.sharding.get_abstract_mesh().manual_axes)
