"""Context parallelism: attention over rows whose tokens are split across the mesh's `sequence` axis.

With `parallel.sequence = n` > 1 each device holds a contiguous 1/n of every row (`axes.LENGTH`), and every
token-wise part of the model runs on its share as it is. Attention is the one part that mixes tokens: a variant
called with the model's `mesh` (a `jformer.axes.Placement`) runs here, under `jax.shard_map` over the mesh, each
device with its share of the batch, heads and tokens, by the placement's `context_strategy`:

- `gather` (the default): each device's queries attend to all keys and values, gathered from the axis
  (`all_gather`), with the variant's own function. Positions carry the tokens' places in the whole row, so
  causal masks and windows stay exact; a variant that masks by index only (`splash` declares `splits_sequence`
  and shards its mask by query blocks itself) cannot take a share of a causal or windowed call.
- `ring` (Liu et al. 2023, "Ring Attention with Blockwise Transformers"): keys and values stay split; n times,
  each device attends its queries to the block it holds with the blockwise engine's `forward_blocks`, merges the
  result into its running output by log-sum-exp (the equation is there) and passes the block to the next device
  (`ppermute`). The backward is a second ring (a custom VJP): each block comes by again, `backward_blocks` gives
  its dq, dk, dv at the merged output and log-sum-exp, and dk, dv travel with their block until it is home.
  Memory for keys and values is O(T / n) per device, against O(T) for `gather`. The ring computes softmax
  attention, Q K^T / sqrt(d) with the soft-cap, windows and segments of the signature, on the blockwise engine
  whatever kernel the variant would pick; a variant that is not softmax attention is refused.

Causal masks leave the early tokens little to see: in n contiguous shares the device holding the last one does
n times the work of the first. So for a causal call whose length splits into 2n halves, the shares are reordered
for the call (`ppermute`) so that device d holds halves d and 2n - 1 - d (load-balanced ordering; Brandon et
al. 2023, MaxText's `context_parallel_load_balance`), each device then skipping the same number of blocks; the
positions travel with the tokens so the masks stay exact, and the output is put back in the row's order.

Not taken here: a bias or mask `[B, H, T, S]` (positional bias encodings: alibi, relative; refused, naming them),
attention dropout (refused), a call whose lengths do not split into n shares (it runs whole, as without this
axis: decode steps, a cache).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax import lax
from jax.sharding import PartitionSpec

from jformer import axes
from jformer.attention import blockwise, sharded

# The blockwise engine's chunk sizes in the ring (a variant's `query_chunk_size`/`key_chunk_size` options override
# them), cut to divide each device's share.
QUERY_CHUNK, KEY_CHUNK = 256, 512
_LOGGED: set[str] = set()
# The arguments of the signature that hold one value per token `[B, T]`/`[B, S]`: split with the tokens.
TOKEN_ARGUMENTS = ("q_segment_ids", "kv_segment_ids", "q_positions", "kv_positions")


@dataclasses.dataclass(frozen=True)
class Split:
  """How one attention call runs over a sequence split across devices (static: from shapes and the placement).

  Attributes:
    placement: the mesh, its rules and the context strategy.
    axis: the mesh axes the tokens split over (those of `axes.LENGTH`).
    size: the number of shares n (the product of their sizes).
    balanced: causal and the query length splits into 2n halves: the load-balanced order (module doc).
  """
  placement: axes.Placement
  axis: tuple[str, ...]
  size: int
  balanced: bool

  @property
  def ring(self) -> bool:
    return self.placement.context_strategy == axes.RING

  def describe(self) -> str:
    order = ", load-balanced causal order" if self.balanced else ""
    return f"sequence split over {self.size} devices ({'x'.join(self.axis)}): {self.placement.context_strategy}{order}"


def split(mesh: axes.Placement | None, query, key, *, causal: bool) -> Split | None:
  """The split of a call with query `[B, T, ...]` and key `[B, S, ...]` on `mesh`, or None when the mesh does not
  split the tokens (no such axis, already inside a shard_map over it, or T or S not a multiple of its size)."""
  if mesh is None:
    return None
  axis = mesh.mesh_axes(axes.LENGTH, query.shape[1])
  if not axis:
    return None
  size = int(np.prod([mesh.mesh.shape[a] for a in axis]))
  if key.shape[1] % size:
    return None
  balanced = causal and query.shape[1] == key.shape[1] and query.shape[1] % (2 * size) == 0
  return Split(mesh, axis, size, balanced)


def attend(name: str, how: Split, fn: Callable, query, key, value, arguments: dict, options: dict, *,
           positions: bool, softmax: bool, operands: dict | None = None) -> jax.Array:
  """Attention `fn(query, key, value, **arguments, **options)` of variant `name` over the split `how`.

  Args:
    name: the variant (for messages).
    how: from `split`.
    fn: the variant's own function (`gather`); the ring runs the blockwise engine instead.
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]`: laid out over the mesh as the caller's.
    arguments: the masking arguments of the signature (and logits_softcap, window when declared).
    options: the variant's options (and `mesh`, for a variant that takes one).
    positions: whether the variant takes explicit positions (declares "positions").
    softmax: whether it computes softmax attention (its weights are `softmax_weights`, no parameters).
    operands: {name: (pytree, its PartitionSpecs)}: per-device data of the kernel, passed to `fn` as keyword
      arguments (`splash`: its mask sharded by query blocks).

  Returns:
    `[B, T, H, Dv]`, laid out like the query.
  """
  refused = [f for f in ("mask", "bias") if arguments.get(f) is not None]
  refused += ["dropout"] if arguments.get("dropout_rate", 0.0) > 0 else []
  where = f"over a sequence split across {how.size} devices (parallel.sequence, context parallelism)"
  if refused:
    raise ValueError(f"attention variant '{name}' cannot run {where} with {refused}: a positional bias encoding "
                     "(alibi, relative) or attention dropout is not split; use rotary or embedding positions, "
                     "model.attention_dropout_rate=0, or parallel.sequence=1")
  if how.ring and not softmax:
    raise ValueError(f"attention variant '{name}' is not softmax attention, which parallel.context_strategy="
                     f"'ring' computes {where}; use parallel.context_strategy='gather'")
  if not how.ring and _by_position(arguments) and not positions:
    raise ValueError(f"attention variant '{name}' masks by index, so it cannot take a share of a causal or windowed "
                     f"call {where}; use 'auto' or 'chunked', or parallel.context_strategy='ring'")
  message = f"attention '{name}': {how.describe()}"
  if message not in _LOGGED:
    _LOGGED.add(message)
    logging.info(message)
  batch = query.shape[0]
  placement = how.placement
  batch_axes, heads_axes, key, value = sharded.shares(placement, query, key, value)
  tokens = {n: jnp.broadcast_to(arguments[n], (batch, x.shape[1])).astype(jnp.int32)
            for n, x in zip(TOKEN_ARGUMENTS, (query, key, query, key)) if arguments.get(n) is not None}
  local = functools.partial(_ring if how.ring else _gather, how, fn, {k: v for k, v in arguments.items()
                                                                     if k not in TOKEN_ARGUMENTS}, options)
  heads = PartitionSpec(batch_axes or None, how.axis, heads_axes or None, None)
  rows = PartitionSpec(batch_axes or None, how.axis)
  operands = operands or {}
  return jax.shard_map(local, mesh=placement.mesh, in_specs=(heads, heads, heads, {n: rows for n in tokens},
                                                             {n: spec for n, (_, spec) in operands.items()}),
                       out_specs=heads, axis_names=sharded.free_axes(placement),
                       check_vma=False)(query, key, value, tokens, {n: x for n, (x, _) in operands.items()})


def _gather(how: Split, fn: Callable, arguments: dict, options: dict, query, key, value, tokens: dict, operands: dict):
  """One device: its queries `[b, t, h, D]` against all keys and values, gathered; positions (the share's places
  in the row) given when the masks read them."""
  by_position = _by_position(arguments)
  q_positions = tokens.get("q_positions", _own_positions(how, query.shape[1]))
  kv_positions = tokens.get("kv_positions", _own_positions(how, key.shape[1]))
  q_ids = tokens.get("q_segment_ids")
  if how.balanced:
    query, q_ids, q_positions = _reorder(how, (query, q_ids, q_positions), to_balanced=True)
  gather = lambda x: None if x is None else lax.all_gather(x, how.axis, axis=1, tiled=True)
  out = fn(query, gather(key), gather(value), **arguments, q_segment_ids=q_ids,
           kv_segment_ids=gather(tokens.get("kv_segment_ids")),
           q_positions=q_positions if by_position else None,
           kv_positions=gather(kv_positions) if by_position else None, **options, **operands)
  return _reorder(how, out, to_balanced=False) if how.balanced else out


def _ring(how: Split, fn, arguments: dict, options: dict, query, key, value, tokens: dict, operands: dict):
  """One device: its queries `[b, t, h, D]` against the key/value blocks passed around the ring (module doc)."""
  del fn, operands  # the ring runs the blockwise engine.
  t, s = query.shape[1], key.shape[1]
  visibility = blockwise.Visibility(tokens.get("q_segment_ids"), tokens.get("kv_segment_ids"),
                                    tokens.get("q_positions", _own_positions(how, t)),
                                    tokens.get("kv_positions", _own_positions(how, s)))
  if how.balanced:
    query, key, value, visibility = _reorder(how, (query, key, value, visibility), to_balanced=True)
  halves = 2 if how.balanced else 1  # chunks do not straddle the two halves, so whole blocks are skipped.
  blocks = blockwise.Blocks(_divisor(t // halves, options.get("query_chunk_size", QUERY_CHUNK)),
                            _divisor(s // halves, options.get("key_chunk_size", KEY_CHUNK)),
                            bool(arguments.get("causal")), float(arguments.get("logits_softcap", 0.0)),
                            None if arguments.get("window") is None else tuple(map(int, arguments["window"])))
  out = _ring_attention(_Ring(how.axis, how.size, blocks), query, key, value, visibility)
  return _reorder(how, out, to_balanced=False) if how.balanced else out


@dataclasses.dataclass(frozen=True)
class _Ring:
  """The static part of a ring: the mesh axes it runs over, their size, the blockwise layout of one step."""
  axis: tuple[str, ...]
  size: int
  blocks: blockwise.Blocks

  def pass_on(self, tree):
    """Each device's `tree` sent to the next device of the ring (the last to the first)."""
    perm = [(i, (i + 1) % self.size) for i in range(self.size)]
    return jax.tree.map(lambda x: lax.ppermute(x, self.axis, perm), tree)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _ring_attention(ring: _Ring, q, k, v, visibility: blockwise.Visibility):
  """softmax attention of this device's queries `[b, t, h, D]` over the keys/values `[b, s, K, D]` of every
  device: `[b, t, h, Dv]`."""
  return _ring_forward(ring, q, k, v, visibility)[0]


def _ring_forward(ring: _Ring, q, k, v, visibility: blockwise.Visibility):
  """The forward ring: (out, its `blockwise.Residuals`), out and lse merged by log-sum-exp over the n blocks."""

  def step(carry, _):
    block, out, lse = carry
    k_s, v_s, kv_ids, kv_positions = block
    seen = visibility._replace(kv_segment_ids=kv_ids, kv_positions=kv_positions)
    out_s, part = blockwise.forward_blocks(query=q, key=k_s, value=v_s, blocks=ring.blocks, visibility=seen)
    merged = jnp.logaddexp(lse, part.lse)
    out = jnp.exp(lse - merged)[..., None] * out + jnp.exp(part.lse - merged)[..., None] * out_s.astype(jnp.float32)
    return (ring.pass_on(block), out, merged), None

  block = (k, v, visibility.kv_segment_ids, visibility.kv_positions)
  init = (block, jnp.zeros(q.shape[:-1] + v.shape[-1:], jnp.float32), jnp.full(q.shape[:-1], blockwise.MASK_VALUE))
  (_, out, lse), _ = lax.scan(step, init, None, length=ring.size)
  out = out.astype(q.dtype)
  return out, blockwise.Residuals(query=q, key=k, value=v, out=out, lse=lse, visibility=visibility)


def _ring_backward(ring: _Ring, residuals: blockwise.Residuals, d_out):
  """The backward ring: each block's dq, dk, dv from the engine's backward at the merged output and log-sum-exp;
  dq stays, dk and dv travel with their block, home after n passes."""
  f32 = lambda x: x.astype(jnp.float32)

  def step(carry, _):
    block, dq, dk, dv = carry
    k_s, v_s, kv_ids, kv_positions = block
    seen = residuals.visibility._replace(kv_segment_ids=kv_ids, kv_positions=kv_positions)
    grads = blockwise.backward_blocks(residuals=residuals._replace(key=k_s, value=v_s, visibility=seen),
                                      d_out=d_out, blocks=ring.blocks)
    block, dk, dv = ring.pass_on((block, dk + f32(grads.key), dv + f32(grads.value)))
    return (block, dq + f32(grads.query), dk, dv), None

  inputs, visibility = (residuals.query, residuals.key, residuals.value), residuals.visibility
  block = (residuals.key, residuals.value, visibility.kv_segment_ids, visibility.kv_positions)
  init = (block, *(jnp.zeros(x.shape, jnp.float32) for x in inputs))
  (_, *grads), _ = lax.scan(step, init, None, length=ring.size)
  return (*(g.astype(x.dtype) for g, x in zip(grads, inputs)), None)


_ring_attention.defvjp(_ring_forward, _ring_backward)


def _by_position(arguments: dict) -> bool:
  """Whether the call's masks read positions (causal masking or a window)."""
  return bool(arguments.get("causal")) or arguments.get("window") is not None


def _own_positions(how: Split, length: int) -> jax.Array:
  """`[1, length]`: the places in the whole row of this device's contiguous share of `length` tokens."""
  return (lax.axis_index(how.axis) * length + jnp.arange(length, dtype=jnp.int32))[None]


def balanced_order(size: int, length: int) -> np.ndarray:
  """`[length]`: the places in the row of the tokens that the `size` devices hold, one after the other, in the
  load-balanced order (what a kernel that masks by index reads as its query positions: `splash`)."""
  half = length // (2 * size)
  return np.concatenate([np.arange(h * half, (h + 1) * half) for d in range(size) for h in _BALANCED(size, d)])


def _divisor(length: int, at_most: int) -> int:
  """The largest divisor of `length` that is at most `at_most` (a chunk size that needs no padding)."""
  return max(c for c in range(1, min(length, at_most) + 1) if length % c == 0)


# The two halves of the row each device holds, device d of n: in the row's order, or load-balanced (module doc).
# In both every device holds one even and one odd half, which is what lets two ppermutes move them.
_CONTIGUOUS = lambda n, d: (2 * d, 2 * d + 1)
_BALANCED = lambda n, d: (d, 2 * n - 1 - d)


def _reorder(how: Split, tree, *, to_balanced: bool):
  """`tree`'s arrays (tokens on axis 1; None left alone) moved from the row's order to the load-balanced one, or
  back: each device sends its even half and its odd half to the devices that hold them in the other order."""
  source, target = (_CONTIGUOUS, _BALANCED) if to_balanced else (_BALANCED, _CONTIGUOUS)
  n = how.size
  holder = lambda layout, half: next(d for d in range(n) if half in layout(n, d))
  moves = [[(holder(source, half), holder(target, half)) for half in range(parity, 2 * n, 2)] for parity in (0, 1)]
  first_even = lambda layout: jnp.asarray([layout(n, d)[0] % 2 == 0 for d in range(n)])[lax.axis_index(how.axis)]
  source_even, target_even = first_even(source), first_even(target)

  def move(x):
    if x is None:
      return None
    first, second = jnp.split(x, 2, axis=1)
    even, odd = (lax.ppermute(y, how.axis, perm) for y, perm in zip(
        (jnp.where(source_even, first, second), jnp.where(source_even, second, first)), moves))
    return jnp.concatenate([jnp.where(target_even, even, odd), jnp.where(target_even, odd, even)], axis=1)

  return jax.tree.map(move, tree, is_leaf=lambda x: x is None)
