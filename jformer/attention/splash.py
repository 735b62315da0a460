"""`splash`: JAX's Pallas TPU splash attention (`jax.experimental.pallas.ops.tpu.splash_attention`), fwd + bwd.

Why this kernel: it ships with jax (maintained by the JAX team, imports on any machine and runs in the Pallas
interpreter on CPU, which is how the variant matrix checks it); it takes separate query and key/value segment ids
(so cross-attention and packed rows), grouped-query key/value heads, and has Pallas kernels for the backward pass. Pallas TPU `flash_attention` takes one segment-id layout per
call too, but no grouped-query heads; `tokamax` (PyPI) carries splash as well but pins its own jax/flax and
its API is still moving.

What it takes: causal masking by index (key j visible to query i iff j <= i), a sliding window by index (its
`LocalMask`; with causal masking the window's left side only), segment ids (query and key/value separately;
equal ids attend, padding is id 0), a logit soft-cap, K < H key/value heads. What it does not: masking by
explicit positions (decode steps; packed training rows come without them), a mask, a bias, dropout; the
registry refuses those and `auto` falls back. The kernel skips the blocks its mask leaves empty (the causal
future, outside the window). Lengths are padded to whole blocks (multiples of 128, the TPU lane width the kernel
requires even in the interpreter); the padding is segment id 0. On a device mesh each device runs the kernel on
its share of the batch and heads (`jformer.attention.sharded`: `jit` does not partition a Pallas call by
itself). On TPU it compiles with Mosaic; where it has run: docs/results/support.md.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import splash_attention as sa
from jax.sharding import NamedSharding, PartitionSpec

from jformer.attention import context_parallel, sharded
from jformer.attention.registry import register, softmax_weights

LANES = 128  # splash's key blocks must be multiples of the TPU lane width.


@register("splash", supports={"causal", "segment_ids", "gqa", "softcap", "window"}, weights=softmax_weights,
          platforms={"tpu"},
          auto_priority=10, example_options=dict(block_q=128, block_kv=128), splits_sequence=True)
def splash(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
           kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, logits_softcap=0.0,
           window=None, mesh=None, block_q=512, block_kv=512, interpret=None):
  """Pallas TPU splash attention (fwd + bwd): segment ids, causal and window by index, soft-cap, GQA.

  Off TPU it runs in the Pallas interpreter (`interpret`).

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0), causal, the segment ids,
    logit soft-cap and window of the variant signature (`jformer/attention/__init__.py`); the other features
    are refused before the call.
    block_q, block_kv: tile sizes (options), multiples of 128; a length shorter than a tile gets one tile of its
      length rounded up to 128.
    mesh: the mesh to run on, each device on its share of the batch and heads (`sharded.per_device`), and of the
      queries when it splits the tokens (`_split`); None = one call over the whole arrays.
    interpret: run in the Pallas interpreter; None = unless JAX's backend is TPU.

  Returns:
    `[B, T, H, Dv]`.
  """
  del q_positions, kv_positions, mask, bias, dropout_rate, dropout_rng  # refused by the registry when given.
  if interpret is None:
    interpret = jax.default_backend() != "tpu"
  how = context_parallel.split(mesh, query, key, causal=causal)
  if how is not None:
    return _split(how, query, key, value, q_segment_ids, kv_segment_ids, causal=causal, window=window,
                  softcap=float(logits_softcap), block_q=block_q, block_kv=block_kv, interpret=interpret)
  kernel = functools.partial(_splash, causal=causal, window=window, softcap=float(logits_softcap), block_q=block_q,
                             block_kv=block_kv, interpret=interpret)
  return sharded.per_device(kernel, query, key, value, q_segment_ids, kv_segment_ids, mesh=mesh)


def _splash(query, key, value, q_segment_ids, kv_segment_ids, *, causal: bool, window, softcap: float,
            block_q: int, block_kv: int, interpret: bool) -> jax.Array:
  """The kernel on one device's arrays (shapes and arguments as `splash`'s)."""
  batch, q_len, heads, head_dim = query.shape
  kv_len = key.shape[1]
  block_q, block_kv = min(block_q, _round_up(q_len, LANES)), min(block_kv, _round_up(kv_len, LANES))
  q_pad, kv_pad = -q_len % block_q, -kv_len % block_kv
  segment_ids = None
  if q_segment_ids is not None or q_pad or kv_pad:  # padding (and the added tail) is id 0: no real query sees it.
    segment_ids = sa.SegmentIds(_padded_ids(q_segment_ids, batch, q_len, q_pad),
                                _padded_ids(kv_segment_ids, batch, kv_len, kv_pad))
  shape = (q_len + q_pad, kv_len + kv_pad)
  head_mask = _head_mask(shape, causal, window)
  blocks = sa.BlockSizes(block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv, block_q_dkv=block_q,
                         block_kv_dkv=block_kv, block_kv_dkv_compute=block_kv, block_q_dq=block_q,
                         block_kv_dq=block_kv)
  kernel = sa.make_splash_mha(sa.MultiHeadMask([head_mask] * heads), block_sizes=blocks, head_shards=1,
                              q_seq_shards=1, interpret=interpret, attn_logits_soft_cap=softcap or None)
  # The kernel takes one example, heads first: q [H, T, D], k/v [K, S, D]; it does not scale the logits.
  q_BxHxTxD = jnp.pad(query * jnp.asarray(head_dim**-0.5, query.dtype),
                      ((0, 0), (0, q_pad), (0, 0), (0, 0))).transpose(0, 2, 1, 3)
  k_BxKxSxD, v_BxKxSxD = (jnp.pad(x, ((0, 0), (0, kv_pad), (0, 0), (0, 0))).transpose(0, 2, 1, 3)
                          for x in (key, value))
  if segment_ids is None:
    out = jax.vmap(kernel)(q_BxHxTxD, k_BxKxSxD, v_BxKxSxD)
  else:
    out = jax.vmap(lambda q, k, v, ids: kernel(q, k, v, segment_ids=ids))(q_BxHxTxD, k_BxKxSxD, v_BxKxSxD,
                                                                            segment_ids)
  return out.transpose(0, 2, 1, 3)[:, :q_len]


def _split(how: context_parallel.Split, query, key, value, q_segment_ids, kv_segment_ids, *, causal: bool, window,
           softcap: float, block_q: int, block_kv: int, interpret: bool) -> jax.Array:
  """Splash over a sequence split across devices (`context_parallel`'s gather, as MaxText runs it): the kernel is
  built for the whole row with its mask split by query blocks (`q_seq_shards`, the mask's query positions in the
  load-balanced order when causal), each device running its share of the queries against all keys and values.
  Each share must be whole lane-wide blocks (the kernel cannot pad a share)."""
  q_len, kv_len, heads = query.shape[1], key.shape[1], query.shape[2]
  share = q_len // how.size
  if share % LANES:
    raise ValueError(f"attention variant 'splash' on a sequence split over {how.size} devices needs each device's "
                     f"{share} queries to be a multiple of {LANES}; make the rows a multiple of {LANES * how.size} "
                     "tokens, or use 'chunked'")
  block_q = math.gcd(min(block_q, share), share)
  block_kv = min(block_kv, _round_up(kv_len, LANES))
  kv_pad = -kv_len % block_kv
  head_mask = _head_mask((q_len, kv_len + kv_pad), causal, window)
  if how.balanced:
    head_mask.q_sequence = context_parallel.balanced_order(how.size, q_len)
  heads_axes = sharded.shares(how.placement, query, key, value)[1]
  head_shares = math.prod(how.placement.mesh.shape[a] for a in heads_axes)
  blocks = sa.BlockSizes(block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv, block_q_dkv=block_q,
                         block_kv_dkv=block_kv, block_kv_dkv_compute=block_kv, block_q_dq=block_q,
                         block_kv_dq=block_kv)
  kernel = sa.make_splash_mha(sa.MultiHeadMask([head_mask] * (heads // head_shares)), block_sizes=blocks,
                              head_shards=1, q_seq_shards=how.size, interpret=interpret,
                              attn_logits_soft_cap=softcap or None)
  spec = kernel.manual_sharding_spec(NamedSharding(how.placement.mesh, PartitionSpec(None, how.axis)))

  def local(query, key, value, *, q_segment_ids, kv_segment_ids, kernel, **_):
    """One device: its queries `[b, t, h, D]` (in the mask's order) against all keys/values `[b, S, k, D]`."""
    batch, t = query.shape[:2]
    ids = sa.SegmentIds(_padded_ids(q_segment_ids, batch, t, 0), _padded_ids(kv_segment_ids, batch, kv_len, kv_pad))
    q_BxHxTxD = (query * jnp.asarray(query.shape[-1]**-0.5, query.dtype)).transpose(0, 2, 1, 3)
    k_BxKxSxD, v_BxKxSxD = (jnp.pad(x, ((0, 0), (0, kv_pad), (0, 0), (0, 0))).transpose(0, 2, 1, 3)
                            for x in (key, value))
    out = jax.vmap(lambda q, k, v, i: kernel(q, k, v, segment_ids=i))(q_BxHxTxD, k_BxKxSxD, v_BxKxSxD, ids)
    return out.transpose(0, 2, 1, 3)

  masking = dict(causal=causal, window=window, q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids)
  return context_parallel.attend("splash", how, local, query, key, value, masking, {}, positions=True, softmax=True,
                                 operands={"kernel": (kernel, spec)})


def _head_mask(shape: tuple[int, int], causal: bool, window):
  """One head's mask: splash's `LocalMask` for a window (index i - left <= j <= i + right, right = 0 when causal),
  else `CausalMask` or `FullMask`."""
  if window is not None:
    left, right = window
    return sa.LocalMask(shape, window_size=(left, 0 if causal else right), offset=0)
  return sa.CausalMask(shape) if causal else sa.FullMask(shape)


def _round_up(length: int, multiple: int) -> int:
  return -(-length // multiple) * multiple


def _padded_ids(ids, batch: int, length: int, pad: int) -> jax.Array:
  """Segment ids `[B, length + pad]` int32: `ids` (all 1 when None), then `pad` zeros (padding)."""
  ids = jnp.ones((batch, length), jnp.int32) if ids is None else jnp.broadcast_to(ids, (batch, length))
  return jnp.pad(ids.astype(jnp.int32), ((0, 0), (0, pad)))
