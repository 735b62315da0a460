"""Axis names, in one place: the logical axes that parameters and activations carry, the mesh axes, and the rules
that map one to the other (the only place shardings are decided); and `Placement`, a mesh with those rules, which
the model passes explicitly to the kernels that run per device.

Logical axes (the modules name every parameter dimension with one of these; a plug-in's `Param` shapes may name
them too, as strings):
  batch     rows of a batch: data-parallel over data x fsdp.
  embed     the model width d_model: parameters sharded over fsdp (ZeRO-3 style).
  heads, kv_heads, mlp, vocab: Megatron-style tensor parallelism (attention heads, key/value heads, feed-forward
            units, vocabulary).
  head_dim, positions, buckets, norm: replicated.
"""

from __future__ import annotations

import dataclasses
import math

import jax

# Logical axes.
BATCH = "batch"
EMBED = "embed"
HEADS = "heads"
KV_HEADS = "kv_heads"
HEAD_DIM = "head_dim"
MLP = "mlp"
VOCAB = "vocab"
POSITIONS = "positions"
BUCKETS = "buckets"
NORM = "norm"

# Mesh axes (`jformer.parallel.make_mesh`).
DATA = "data"
FSDP = "fsdp"
TENSOR = "tensor"
MESH_AXES = (DATA, FSDP, TENSOR)

# Logical axis -> mesh axes (flax's `nn.logical_axis_rules` pairs).
RULES = (
    (BATCH, (DATA, FSDP)),
    (EMBED, FSDP),
    (HEADS, TENSOR),
    (KV_HEADS, TENSOR),
    (MLP, TENSOR),
    (VOCAB, TENSOR),
    (HEAD_DIM, None),
    (POSITIONS, None),
    (BUCKETS, None),
    (NORM, None),
)

# The axis `jax.pmap` maps the batch over (`parallel.mode="pmap"`).
PMAP_AXIS = BATCH


@dataclasses.dataclass(frozen=True)
class Placement:
  """A device mesh and the rules that map logical axes onto it: what a kernel needs to run on each device's share
  (`jformer.attention.sharded.per_device`). The model holds one (`None` on one device) and passes it to the
  attention call as `mesh=`.
  """
  mesh: jax.sharding.Mesh
  rules: tuple = RULES

  def mesh_axes(self, logical: str, size: int) -> tuple[str, ...]:
    """The mesh axes (of more than one device, not yet manual) that `logical` maps to, when their product divides
    `size`; else () (the dimension is not split: those devices compute the same part)."""
    mesh = self.mesh
    manual = set(getattr(jax.sharding.get_abstract_mesh(), "manual_axes", ()) or ())
    axes = dict(self.rules).get(logical)
    axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
    axes = tuple(a for a in axes if a in mesh.axis_names and a not in manual and mesh.shape[a] > 1)
    return axes if size % math.prod(mesh.shape[a] for a in axes) == 0 else ()

# The model config key that sets the size of each logical axis (to name what differs between a checkpoint and a
# model: `jformer.checkpoint.shapes`).
CONFIG_KEYS = {EMBED: "model.d_model", HEADS: "model.num_heads", KV_HEADS: "model.num_kv_heads",
               HEAD_DIM: "model.d_model / model.num_heads", MLP: "model.d_ff", VOCAB: "model.vocab_size",
               POSITIONS: "model.max_length"}
