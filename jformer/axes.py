"""Axis names, in one place: the logical axes that parameters and activations carry, the mesh axes, and the rules
that map one to the other (the only place shardings are decided); and `Placement`, a mesh with those rules, which
the model passes explicitly to the kernels that run per device.

Logical axes (the modules name every parameter dimension with one of these; a plug-in's `Param` shapes may name
them too, as strings):
  batch     rows of a batch: data-parallel over data x fsdp.
  length    the tokens of a row (activations' sequence dimension): context parallelism over sequence; each
            device holds a contiguous share, attention runs it under `jformer.attention.context_parallel`.
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
LENGTH = "length"
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
SEQUENCE = "sequence"
TENSOR = "tensor"
MESH_AXES = (DATA, FSDP, SEQUENCE, TENSOR)

# Logical axis -> mesh axes (flax's `nn.logical_axis_rules` pairs).
RULES = (
    (BATCH, (DATA, FSDP)),
    (LENGTH, SEQUENCE),
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

# How attention runs over a sequence split along SEQUENCE (`parallel.context_strategy`,
# `jformer.attention.context_parallel`): each device's queries against all keys and values gathered from the
# axis, or key/value blocks passed around it as a ring.
GATHER, RING = "gather", "ring"
CONTEXT_STRATEGIES = (GATHER, RING)


@dataclasses.dataclass(frozen=True)
class Placement:
  """A device mesh and the rules that map logical axes onto it: what a kernel needs to run on each device's share
  (`jformer.attention.sharded.per_device`), and how attention runs over a sequence split across devices
  (`context_strategy`). The model holds one (`None` on one device) and passes it to the attention call as `mesh=`.
  """
  mesh: jax.sharding.Mesh
  rules: tuple = RULES
  context_strategy: str = GATHER  # one of CONTEXT_STRATEGIES: attention over a sequence split along SEQUENCE.

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
               HEAD_DIM: "model.head_dim (or model.d_model / model.num_heads)", MLP: "model.d_ff",
               VOCAB: "model.vocab_size", POSITIONS: "model.max_length"}
