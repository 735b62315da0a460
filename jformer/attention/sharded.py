"""Library kernels on a device mesh: each device runs the kernel on its own share of the batch and the heads.

XLA's SPMD partitioner does not split a Pallas call (`splash`, `pallas_gpu`) the way it splits ordinary ops: under
`jit` over a mesh its operands are gathered and each device computes the whole attention. `per_device` runs the
kernel under `jax.shard_map` instead (as MaxText does for splash): batch over the mesh axes the logical axis
"batch" maps to, query heads over those of "heads", key/value heads over those of "kv_heads", segment ids `[B, L]`
with the batch. The mesh and the rules are those in context while tracing: JAX's (`jax.set_mesh`,
`jax.sharding.use_abstract_mesh`) or else the one `use_mesh` gives, and flax's `nn.logical_axis_rules`.
jformer.train.runner's MeshRunner traces its steps within `use_mesh` (mesh and rules): a JAX mesh in context would
also make flax constrain every boxed parameter while tracing, which fails for `nn.DenseGeneral` kernels of several
output axes (flax 0.12.8 unboxes them at their flat, 2-D init shape). Without a mesh or rules (one device, inside
a `shard_map` over every axis) the kernel is called as it is.

A dimension that the product of its mesh axes does not divide is not split over them (those devices compute the
same part). Key/value heads go with the query heads they serve: when "kv_heads" cannot be split as "heads" is
(e.g. 1 key/value head on 2 tensor devices), they are repeated to one per query head first. `cudnn` does not need
this: jax's cuDNN attention carries its own partitioning rules (`custom_partitioning`, batch and heads).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from jformer.ops.attention import repeat_kv

_MESH: contextvars.ContextVar = contextvars.ContextVar("jformer_attention_mesh", default=None)


@contextlib.contextmanager
def use_mesh(mesh: jax.sharding.Mesh, rules):
  """Within it, library kernels traced where JAX has no mesh in context run per device over `mesh`, split as the
  logical-axis `rules` (flax's `nn.logical_axis_rules` pairs, also in context) map "batch" and "heads"."""
  token = _MESH.set(mesh)
  try:
    with nn.logical_axis_rules(rules):
      yield
  finally:
    _MESH.reset(token)


def per_device(kernel: Callable, query, key, value, q_segment_ids=None, kv_segment_ids=None) -> jax.Array:
  """`kernel(query, key, value, q_segment_ids, kv_segment_ids)`, run on each device's share (module doc).

  Args:
    kernel: the per-device attention: query `[b, T, h, D]`, key/value `[b, S, k, D]`/`[b, S, k, Dv]`, segment
      ids `[b, T]`/`[b, S]` int or None (as given) -> `[b, T, h, Dv]`, b, h and k this device's share.
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0); segment ids broadcastable to
      `[B, T]` and `[B, S]`, or None.

  Returns:
    `[B, T, H, Dv]`, laid out over the mesh like the query.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty and _MESH.get() is not None:
    mesh = _MESH.get().abstract_mesh
  batch = query.shape[0]
  batch_axes, heads_axes = _split(mesh, ("batch", "heads"), (batch, query.shape[2]))
  _, kv_heads_axes = _split(mesh, ("batch", "kv_heads"), (batch, key.shape[2]))
  if not batch_axes and not heads_axes:
    return kernel(query, key, value, q_segment_ids, kv_segment_ids)
  if kv_heads_axes != heads_axes:
    key, value = (repeat_kv(x, query.shape[2]) for x in (key, value))
  given = {name: jnp.broadcast_to(ids, (batch, x.shape[1])) for name, ids, x in
           (("q_segment_ids", q_segment_ids, query), ("kv_segment_ids", kv_segment_ids, key)) if ids is not None}

  def local(query, key, value, ids):
    return kernel(query, key, value, ids.get("q_segment_ids"), ids.get("kv_segment_ids"))

  heads = PartitionSpec(batch_axes or None, None, heads_axes or None, None)
  rows = PartitionSpec(batch_axes or None, None)
  manual = frozenset(mesh.axis_names) - frozenset(mesh.manual_axes)
  return jax.shard_map(local, mesh=mesh, in_specs=(heads, heads, heads, {name: rows for name in given}),
                       out_specs=heads, axis_names=manual, check_vma=False)(query, key, value, given)


def _split(mesh, logical: tuple[str, ...], sizes: tuple[int, ...]) -> list[tuple[str, ...]]:
  """For each logical axis name, the mesh axes (of `mesh`, not yet manual, more than one device) the rules in
  context map it to, if their product divides its size; else ()."""
  if mesh.empty:
    return [()] * len(logical)
  spec = nn.logical_to_mesh_axes(logical) or (None,) * len(logical)
  split = []
  for axes, size in zip(spec, sizes):
    axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
    axes = tuple(a for a in axes if a in mesh.axis_names and a not in mesh.manual_axes and mesh.shape[a] > 1)
    split.append(axes if size % math.prod(mesh.shape[a] for a in axes) == 0 else ())
  return split
