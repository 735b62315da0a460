"""Blockwise softmax attention with an online softmax and a custom VJP: memory linear in the length.

The one engine of the pure-JAX attention paths: `chunked`, the learned similarity functions (`scored`: additive,
general, cosine, ...), the flex variants (`flex`: a score_mod and a mask_mod) and context parallelism's ring run
here. Not a variant itself. Its interface: `forward_blocks` (the output, and `Residuals` with the log-sum-exp) and
`backward_blocks` (`Gradients` from those) over all keys or a range of them, merged by the caller (a ring, a new
kernel's tiling); `attention` is the two over all keys as a custom VJP, in the variant signature.

Forward (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023), for query chunk i over key chunks j:
    s_ij = mod(cap(score(q_i, k_j))) + bias_ij      (invisible pairs: MASK_VALUE)
    m_i <- max(m_i, rowmax s_ij),   a = e^(m_i_old - m_i)
    l_i <- a l_i + rowsum e^(s_ij - m_i),   acc_i <- a acc_i + e^(s_ij - m_i) v_j
    out_i = acc_i / l_i,   lse_i = m_i + log l_i       (the logsumexp, kept for the backward)
Backward, recomputing p_ij = e^(s_ij - lse_i) block by block, with Delta_i = rowsum(dout_i * out_i):
    dv_j += p_ij^T dout_i,   ds_ij = p_ij * (dout_i v_j^T - Delta_i),
    (dq_i, dk_j, dparams, dbias_ij, dcaptured) += the vjp of s_ij applied to ds_ij,
every sum in a fixed order (sequential scans), so the gradients are the same bits run to run.
The score is q k^T / sqrt(d) (paper eq. 1) unless a `score` function is given, soft-capped (cap * tanh(s / cap),
Gemma 2) when a cap is given; `mod` is a flex variant's score_mod (`Mods`; the identity otherwise). Any
differentiable `score(q [B, H, cq, E], k [B, H, ck, E], params) -> [B, H, cq, ck]` and score_mod work: the
parameters and captured per-token values they read get their gradients here, and only one block of their
intermediates (e.g. additive attention's `[B, H, cq, ck, hidden]`) is ever held.

Key j is visible to query i iff the segments match (non-zero), the causal rule and the sliding window hold by
position, the boolean `mask` allows it and a flex variant's mask_mod does. Before either pass a block mask
classifies every block once per call (`block_kinds`): EMPTY (no query of it sees a key of it: both passes skip it),
FULL (every query sees every key: computed without masking, mask_mod not evaluated) or PARTIAL (the visibility is
computed, mask_mod included, and applied). It is read from per-chunk minima and maxima of segment ids and positions
(exact for packed rows masked by index, as the model trains; elsewhere an undecided block is PARTIAL, always
correct) and the mask_mod's values on each block; what is known when the program is built is a constant of it. So
causal attention does about half the work, a window O(T * window), and a mask_mod runs only on the blocks it partly
masks. Inside, heads come first and are grouped: query `[B, K, G, T, D]` (query head h = k * G + g uses key/value
head k; H = K * G), key/value `[B, K, S, D]`, lengths padded to whole chunks.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jformer.ops import masks
from jformer.ops.softcap import soft_cap

MASK_VALUE = float(jnp.finfo(jnp.float32).min)
# What `block_kinds` says of a block.
EMPTY, PARTIAL, FULL = 0, 1, 2
# score(q_BxHxQxE, k_BxHxCxE, params) -> logits_BxHxQxC float32; None = q k^T on the (pre-scaled) query.
Score = Callable[..., jax.Array]


@dataclasses.dataclass(frozen=True)
class Mods:
  """A flex variant's functions in the engine's calling convention (`jformer.attention.flex` builds them):

      score_mod(score, b, h, q_idx, kv_idx, params, q, kv) -> the new scores (float32, broadcastable to score)
      mask_mod(b, h, q_idx, kv_idx, params, q, kv) -> bool, True = visible

  b, h, q_idx, kv_idx are int32 arrays broadcastable against the block's scores `[B, K, G, cq, ck]` (b the row, h =
  k * G + g the query head, q_idx / kv_idx the positions of queries and keys); `params` the pytree of `attention`;
  q / kv: {name: the captured per-token values at the block's queries `[B, K or 1, G or 1, cq, 1]` / keys
  `[B, K or 1, G or 1, 1, ck]`}. `mask_reads_indices`: the mask_mod reads b, h, q_idx and kv_idx only, so where
  the positions are the index its block mask is evaluated once per shape, when the program is built. Hashable.
  """
  score_mod: Callable | None = None
  mask_mod: Callable | None = None
  mask_reads_indices: bool = False


@dataclasses.dataclass(frozen=True)
class Blocks:
  """Static layout of one call (hashable): chunk sizes (the lengths are padded to multiples of them), the causal
  flag, the logit soft-cap (0: none), the sliding window ((left, right), or None), the `score` function (None:
  Q K^T / sqrt(E), paper eq. 1) and a flex variant's `Mods` (`Mods()`: none)."""
  query_chunk: int
  key_chunk: int
  causal: bool
  softcap: float = 0.0
  window: tuple[int, int] | None = None
  score: Score | None = None
  mods: Mods = Mods()


class Visibility(NamedTuple):
  """Per-token arrays deciding which key each query sees (`ops.masks.visible_keys`): segment ids `[B or 1, T]` /
  `[B or 1, S]` int (0: padding; None: one segment) and positions likewise (None: the index)."""
  q_segment_ids: jax.Array | None = None
  kv_segment_ids: jax.Array | None = None
  q_positions: jax.Array | None = None
  kv_positions: jax.Array | None = None


class Captured(NamedTuple):
  """Per-token values a flex variant's mods read (`Mods`), grouped and padded: {name: `[B, K or 1, G or 1,
  T_padded]`} at the queries, {name: `[B, K or 1, G or 1, S_padded]`} at the keys."""
  q: dict
  kv: dict


class Residuals(NamedTuple):
  """What `backward_blocks` differentiates at: a `forward_blocks` call's inputs, its output `[B, T, H, Dv]` and
  log-sum-exp `[B, T, H]` float32 (a caller merging calls puts the merged ones here, `_replace(out=, lse=)`), and
  its block mask (`block_kinds`; None: computed again)."""
  query: jax.Array
  key: jax.Array
  value: jax.Array
  out: jax.Array
  lse: jax.Array
  visibility: Visibility = Visibility()
  params: Any = None
  captures: dict | None = None
  mask: jax.Array | None = None
  bias: jax.Array | None = None
  kinds: jax.Array | None = None


class Gradients(NamedTuple):
  """`backward_blocks`' gradients wrt a `forward_blocks` call's inputs, each shaped as it (None where it was None)."""
  query: jax.Array
  key: jax.Array
  value: jax.Array
  captures: dict | None = None
  bias: jax.Array | None = None
  params: Any = None


def attention(query, key, value, *, causal, q_segment_ids, kv_segment_ids, q_positions, kv_positions, mask, bias,
              query_chunk_size: int, key_chunk_size: int, score: Score | None = None, params=None,
              softcap: float = 0.0, window: tuple[int, int] | None = None, mods: Mods | None = None,
              captures=None) -> jax.Array:
  """`forward_blocks`' output over all keys, `backward_blocks` its VJP, called with the variant signature's
  arguments: `query_chunk_size` and `key_chunk_size`, `softcap` and `window` (`ops.masks.window_mask`) make the
  `Blocks` with `score` and `mods`; the segment ids and positions the `Visibility`. Returns `[B, T, H, Dv]`."""
  window = None if window is None else (int(window[0]), int(window[1]))
  blocks = Blocks(query_chunk_size, key_chunk_size, causal, float(softcap), window, score, mods or Mods())
  visibility = Visibility(q_segment_ids, kv_segment_ids, q_positions, kv_positions)
  return _attend(blocks, query, key, value, captures, bias, params, visibility, mask)


def forward_blocks(*, query, key, value, blocks: Blocks, visibility: Visibility = Visibility(), params=None,
                   captures=None, mask=None, bias=None) -> tuple[jax.Array, Residuals]:
  """out = softmax(s) V, s = mod(cap(score(Q, K))) + bias over the visible keys given (all or a range of them),
  and lse = log sum_keys e^s, by the online softmax (module doc). Ranges a and b of the keys run a call each and
  merge by the log-sum-exp; the merge's backward is each range's `backward_blocks` at the merged out and lse
  (softmax's gradient needs no more), the ranges' gradients summed:

      lse = log(e^lse_a + e^lse_b),   out = e^(lse_a - lse) out_a + e^(lse_b - lse) out_b.

  Args:
    query: `[batch, length, heads, head_dim]` = `[B, T, H, E]`; key `[B, S, K, E]`, value `[B, S, K, Dv]`, H a
      multiple of K (K == H with a `blocks.score`); mask (bool), bias (float): broadcastable to `[B, H, T, S]`.
    params: the pytree `blocks.score` and the mods read; captures: the per-token values the mods read, {"q":
      {name: `[B, T, H]` or `[B, T]`}, "kv": {name: `[B, S, H]` or `[B, S]`}}, float. (None: none of each.)

  Returns:
    (out `[B, T, H, Dv]` in the query dtype, its `Residuals`, lse `[B, T, H]` float32 among them). A query that
    sees no key gets an unspecified finite output and an lse near MASK_VALUE (nothing, once merged).
  """
  (q, k, v, captured, bias4), (padded, mask4) = _inside(blocks, visibility, mask, query, key, value, captures, bias)
  kinds = block_kinds(blocks, padded, mask4, params, captured, query_shape=query.shape, key_shape=key.shape)
  out, lse = (_outside(x, query.shape[1]) for x in _forward(blocks, q, k, v, params, captured, padded, mask4, bias4,
                                                            kinds))
  return out, Residuals(query, key, value, out, lse, visibility, params, captures, mask, bias, kinds)


def backward_blocks(*, residuals: Residuals, d_out, blocks: Blocks) -> Gradients:
  """The gradients of `forward_blocks` at `residuals` for the cotangent `d_out` `[B, T, H, Dv]` of its output, by
  the backward of the module doc (each block's softmax recomputed from the lse). `blocks`: the forward's."""
  r = residuals
  inside, outside, (padded, mask) = jax.vjp(functools.partial(_inside, blocks, r.visibility, r.mask), r.query,
                                            r.key, r.value, r.captures, r.bias, has_aux=True)
  q, k, v, captured, bias = inside
  kinds = r.kinds if r.kinds is not None else block_kinds(blocks, padded, mask, r.params, captured,
                                                          query_shape=r.query.shape, key_shape=r.key.shape)
  out, lse, d_out = (_grouped_tokens(x, -r.query.shape[1] % blocks.query_chunk, r.key.shape[2])
                     for x in (r.out, r.lse, d_out))
  grads, dparams = _backward(blocks, q, k, v, r.params, captured, padded, mask, bias, kinds, out, lse, d_out)
  cast_like = lambda tree, like: jax.tree.map(lambda d, x: d.astype(x.dtype), tree, like)
  return Gradients(*outside(cast_like(grads, inside)), cast_like(dparams, r.params))


def _attend_forward(blocks, query, key, value, captures, bias, params, visibility, mask):
  return forward_blocks(query=query, key=key, value=value, blocks=blocks, visibility=visibility, params=params,
                        captures=captures, mask=mask, bias=bias)


_attend = jax.custom_vjp(lambda blocks, *inputs: _attend_forward(blocks, *inputs)[0], nondiff_argnums=(0,))
_attend.defvjp(_attend_forward, lambda blocks, residuals, d_out: (  # no gradient for the visibility and mask.
    *backward_blocks(residuals=residuals, d_out=d_out, blocks=blocks), None, None))


def _inside(blocks: Blocks, visibility: Visibility, mask, query, key, value, captures, bias) -> tuple:
  """The inputs in the engine's layout (module doc), padded to whole chunks: ((the query `[B, K, G, T, E]`, times
  1 / sqrt(E) without a score function so the blocks compute q k^T; key and value `[B, K, S, D]`; the `Captured`
  values; the bias 4-D or None), (the visibility, `_padded`; the mask 4-D or None)): differentiable, and not.
  Refuses shapes the engine does not take (query and key agree on batch and head_dim: `shape[::3]`)."""
  if (query.ndim, key.ndim, value.shape[:3], query.shape[::3]) != (4, 4, key.shape[:3], key.shape[::3]) or (
      query.shape[2] % key.shape[2] or blocks.score is not None and query.shape[2] != key.shape[2]):
    raise ValueError(f"attention takes query [B, T, H, E], key [B, S, K, E] and value [B, S, K, Dv] with H a multiple"
                     f" of K (K == H with a score function: the registry repeats key/value heads for a variant that "
                     f"does not declare 'gqa'), got {query.shape}, {key.shape} and {value.shape}")
  (batch, q_len, heads, head_dim), (kv_len, kv_heads) = query.shape, key.shape[1:3]
  pads = (-q_len % blocks.query_chunk, -kv_len % blocks.key_chunk)
  query = query if blocks.score is not None else query * jnp.asarray(head_dim**-0.5, query.dtype)
  k, v = (jnp.pad(x, ((0, 0), (0, pads[1]), (0, 0), (0, 0))).transpose(0, 2, 1, 3) for x in (key, value))
  captured = Captured(*({name: _grouped_tokens(x, pad, kv_heads) for name, x in (captures or {}).get(side, {}).items()}
                        for side, pad in zip(("q", "kv"), pads)))
  bias, mask = (_pairwise(x, name, shape=(batch, heads, q_len, kv_len), pads=pads)
                for x, name in ((bias, "bias"), (mask, "mask")))
  differentiable = (_grouped_tokens(query, pads[0], kv_heads), k, v, captured, bias)
  return differentiable, (_padded(blocks, visibility, q_len, kv_len), mask)


def _padded(blocks: Blocks, visibility: Visibility, q_len: int, kv_len: int) -> Visibility:
  """`visibility` padded to whole chunks (ids with 0, positions with the last one: per-chunk ranges stay tight),
  what the call does not give a constant of the program: one segment, positions by index."""
  pad = lambda x, n, c, default, mode: jnp.pad(jnp.atleast_2d(default(n) if x is None else x).astype(jnp.int32),
                                               ((0, 0), (0, -n % c)), mode=mode)
  cq, ck = blocks.query_chunk, blocks.key_chunk
  with jax.ensure_compile_time_eval():
    return Visibility(pad(visibility.q_segment_ids, q_len, cq, jnp.ones, "constant"),
                      pad(visibility.kv_segment_ids, kv_len, ck, jnp.ones, "constant"),
                      pad(visibility.q_positions, q_len, cq, jnp.arange, "edge"),
                      pad(visibility.kv_positions, kv_len, ck, jnp.arange, "edge"))


def block_kinds(blocks: Blocks, visibility: Visibility, mask, params, captured: Captured, *, query_shape: tuple,
                key_shape: tuple) -> jax.Array:
  """The block mask of the padded visibility and mask: `[T_padded / cq, S_padded / ck]` int8, EMPTY, PARTIAL or
  FULL per block (module doc). Each part of the visibility says, per row, which blocks it leaves empty and which
  full; a block is EMPTY where one part empties it in every row, FULL where every part fills it in every row (a
  `mask`: none FULL). A constant of the program when the call gives neither segment ids nor positions and the
  mask_mod reads the indices only."""
  with jax.ensure_compile_time_eval():
    parts = [_segment_blocks(blocks, visibility), _position_blocks(blocks, visibility)]
    if blocks.mods.mask_mod is not None:
      if blocks.mods.mask_reads_indices and not any(isinstance(p, jax.core.Tracer) for p in visibility[2:]):
        parts.append(_index_mod_blocks(blocks, tuple(query_shape), tuple(key_shape)))
      else:
        parts.append(_mod_blocks(blocks, visibility.q_positions, visibility.kv_positions, params, captured,
                                 query_shape, key_shape))
    empty = functools.reduce(jnp.logical_or, [e for e, _ in parts]).all(0)
    full = functools.reduce(jnp.logical_and, [f for _, f in parts]).all(0) & (mask is None)
    return jnp.where(empty, EMPTY, jnp.where(full, FULL, PARTIAL)).astype(jnp.int8)


def _chunk_ranges(blocks: Blocks, q_BxT: jax.Array, kv_BxS: jax.Array) -> tuple:
  """(minimum, maximum) per query chunk `[B, nq, 1]` of `q_BxT`, then per key chunk `[B, 1, nk]` of `kv_BxS`."""
  q, kv = (x.reshape(x.shape[0], -1, c) for x, c in ((q_BxT, blocks.query_chunk), (kv_BxS, blocks.key_chunk)))
  return q.min(-1)[:, :, None], q.max(-1)[:, :, None], kv.min(-1)[:, None], kv.max(-1)[:, None]


def _segment_blocks(blocks: Blocks, visibility: Visibility) -> tuple[jax.Array, jax.Array]:
  """(empty, full) `[B or 1, nq, nk]` by segment ids (ids >= 0, 0 = padding): empty where the id ranges of the
  chunks are disjoint or one chunk is all padding; full where both chunks hold one and the same non-zero id."""
  q_lo, q_hi, kv_lo, kv_hi = _chunk_ranges(blocks, visibility.q_segment_ids, visibility.kv_segment_ids)
  empty = (q_hi < kv_lo) | (kv_hi < q_lo) | (q_hi == 0) | (kv_hi == 0)
  return empty, (q_lo == q_hi) & (kv_lo == kv_hi) & (q_lo == kv_lo) & (q_lo != 0)


def _position_blocks(blocks: Blocks, visibility: Visibility) -> tuple[jax.Array, jax.Array]:
  """(empty, full) `[B or 1, nq, nk]` by the causal rule and the window, from the chunks' position ranges (neither:
  nothing empty, all full)."""
  q_lo, q_hi, kv_lo, kv_hi = _chunk_ranges(blocks, visibility.q_positions, visibility.kv_positions)
  empty, full = jnp.zeros((), bool), jnp.ones((), bool)
  if blocks.causal:
    empty, full = empty | (kv_lo > q_hi), full & (kv_hi <= q_lo)
  if blocks.window is not None:
    left, right = blocks.window
    empty = empty | (kv_hi < q_lo - left) | (kv_lo > q_hi + right)
    full = full & (kv_lo >= q_hi - left) & (kv_hi <= q_lo + right)
  return empty, full


@functools.lru_cache(maxsize=64)
def _index_mod_blocks(blocks: Blocks, query_shape: tuple, key_shape: tuple) -> tuple[jax.Array, jax.Array]:
  """`_mod_blocks` where positions are the index: evaluated once per shape, when the program is built (`block_kinds`
  calls it at compile time)."""
  padded = _padded(blocks, Visibility(), query_shape[1], key_shape[1])
  return _mod_blocks(blocks, padded.q_positions, padded.kv_positions, None, Captured({}, {}), query_shape, key_shape)


def _mod_blocks(blocks: Blocks, q_positions, kv_positions, params, captured: Captured, query_shape: tuple,
                key_shape: tuple) -> tuple[jax.Array, jax.Array]:
  """(empty, full) `[B or 1, nq, nk]` by the mask_mod, evaluated on one chunk of queries against all keys at a
  time (memory cq x S), every head of a row reduced together."""
  cq, ck = blocks.query_chunk, blocks.key_chunk
  kv_len = kv_positions.shape[1]
  b, h = _batch_and_heads(query_shape[0], key_shape[2], query_shape[2] // key_shape[2])
  kv_idx = kv_positions[:, None, None, None, :]
  kv = {name: x[..., None, :] for name, x in captured.kv.items()}

  def query_chunk(i):
    q_idx = lax.dynamic_slice_in_dim(q_positions, i * cq, cq, axis=1)[:, None, None, :, None]
    q = {name: x[..., None] for name, x in _chunk(captured.q, i, cq).items()}
    visible = jnp.asarray(blocks.mods.mask_mod(b, h, q_idx, kv_idx, params, q, kv))
    visible = jnp.broadcast_to(visible, jnp.broadcast_shapes(visible.shape, (1, 1, 1, cq, kv_len)))
    visible = visible.reshape(visible.shape[0], -1, cq, kv_len // ck, ck)
    return visible.any((1, 2, 4)), visible.all((1, 2, 4))

  seen, all_seen = lax.map(query_chunk, jnp.arange(q_positions.shape[1] // cq))  # [nq, B or 1, nk]
  return ~jnp.swapaxes(seen, 0, 1), jnp.swapaxes(all_seen, 0, 1)


def _forward(blocks: Blocks, q, k, v, params, captured: Captured, visibility: Visibility, mask, bias, kinds):
  """The forward pass inside (module doc), `lax.map` over query chunks, `lax.scan` over key chunks, each block as
  its kind says: per query chunk, out `[nq, B, K, G, cq, Dv]` (the query dtype) and lse `[nq, B, K, G, cq]` f32."""
  batch, kv_heads, groups, q_len, _ = q.shape
  cq, ck = blocks.query_chunk, blocks.key_chunk
  # Masking inputs tied to the query: under a scan over layers they are loop-invariant, and JAX's partial evaluation
  # would hoist all that depends on them alone out of the loop, every block's visibility stacked (the [T, S] mask).
  q, visibility, mask, kinds = lax.optimization_barrier((q, visibility, mask, kinds))
  indices = functools.partial(_indices, blocks, visibility, batch, kv_heads, groups)

  def query_chunk(i):
    q_blk, q_caps = _chunk((q, captured.q), i, cq)

    def key_chunk(carry, j):
      (k_blk, v_blk), kv_caps = _chunk((k, v), j, ck, axis=2), _chunk(captured.kv, j, ck)
      index = indices(i, j)

      def attend(carry, visible):
        m, l, acc = carry
        s = _block_logits(blocks, index, visible, q_blk, k_blk, params, _pairwise_block(bias, i, j, cq, ck), q_caps,
                          kv_caps)
        s = s if visible is None else jnp.where(visible, s, MASK_VALUE)
        m_new = jnp.maximum(m, s.max(-1))
        correction = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[..., None])
        pv = jnp.einsum("bkgqc,bkcd->bkgqd", p.astype(v.dtype), v_blk, preferred_element_type=jnp.float32)
        return m_new, correction * l + p.sum(-1), correction[..., None] * acc + pv

      def partial(carry):
        visible = _visible(blocks, visibility, mask, params, q_caps, kv_caps, index, i, j, kv_heads)
        return lax.cond(jnp.any(visible), functools.partial(attend, visible=visible), lambda c: c, carry)

      branches = (lambda c: c, partial, functools.partial(attend, visible=None))
      return lax.switch(kinds[i, j].astype(jnp.int32), branches, carry), None

    init = (jnp.full((batch, kv_heads, groups, cq), MASK_VALUE), jnp.zeros((batch, kv_heads, groups, cq)),
            jnp.zeros((batch, kv_heads, groups, cq, v.shape[-1])))
    (m, l, acc), _ = lax.scan(key_chunk, init, jnp.arange(k.shape[2] // ck))
    l = jnp.where(l > 0, l, 1.0)  # 0 only where every block was skipped: no visible key at all.
    return (acc / l[..., None]).astype(q.dtype), m + jnp.log(l)

  return lax.map(query_chunk, jnp.arange(q_len // cq))


def _block_logits(blocks: Blocks, index, visible, q_blk, k_blk, params, bias_blk, q_caps, kv_caps) -> jax.Array:
  """`[B, K, G, cq, ck]` float32: mod(cap(score)) + bias of one block, before masking (score: q k^T, or
  `blocks.score` per head, G = 1 then): a function of everything the backward differentiates (query, key,
  parameters, bias and captured values of the block). The score_mod sees the indices and captured values of a
  visible pair where `visible` (None: all) masks one (`visible_arguments`)."""
  if blocks.score is None:
    s = jnp.einsum("bkgqd,bkcd->bkgqc", q_blk, k_blk, preferred_element_type=jnp.float32)
  else:
    s = blocks.score(q_blk[:, :, 0], k_blk, params).astype(jnp.float32)[:, :, None]
  s = soft_cap(s, blocks.softcap)
  if blocks.mods.score_mod is not None:
    q = {name: x[..., None] for name, x in q_caps.items()}
    kv = {name: x[..., None, :] for name, x in kv_caps.items()}
    index, q, kv = visible_arguments(visible, (index, q, kv))
    s = jnp.broadcast_to(blocks.mods.score_mod(s, *index, params, q, kv), s.shape).astype(jnp.float32)
  if bias_blk is not None:
    s = s + _grouped(bias_blk.astype(jnp.float32), s.shape[1])
  return s


def visible_arguments(visible: jax.Array | None, arguments):
  """`arguments` (a pytree of arrays broadcastable against `visible`: a mod's indices and captured values) where
  `visible`, and elsewhere the values of one visible pair (the first), each leaf broadcast to its shape with
  `visible`'s. An elementwise mod evaluated on them computes at a masked pair what it computes at a visible one: a
  formula finite on the pairs it is used on (a log of the distance back, finite only where causal masking leaves
  the key visible) puts no NaN or inf into either pass, where masking its output alone would still send 0 * inf
  into the gradients. `visible` None (nothing masked): `arguments` as they are."""
  if visible is None:
    return arguments
  leaves, tree = jax.tree.flatten(arguments)
  shape = jnp.broadcast_shapes(visible.shape, *(x.shape for x in leaves))
  first = jnp.unravel_index(jnp.argmax(jnp.broadcast_to(visible, shape).reshape(-1)), shape)

  def at_first(x):
    x = x.reshape((1,) * (len(shape) - x.ndim) + x.shape)
    return x[tuple(i if n > 1 else 0 for i, n in zip(first, x.shape))]

  return jax.tree.unflatten(tree, [jnp.where(visible, x, at_first(x)) for x in leaves])


def _backward(blocks: Blocks, q, k, v, params, captured: Captured, visibility: Visibility, mask, bias, kinds, out,
              lse, dout):
  """The backward pass inside (module doc) at out `[B, K, G, T, Dv]` and lse `[B, K, G, T]`: `lax.scan` over key
  chunks, inner `lax.scan` over query chunks, each block as its kind says; float32 ((dq, dk, dv, dcaptured, dbias),
  dparams)."""
  batch, kv_heads, groups, q_len = q.shape[:4]
  cq, ck = blocks.query_chunk, blocks.key_chunk
  f32_zeros = lambda tree: jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), tree)
  f32 = lambda tree: jax.tree.map(lambda x: x.astype(jnp.float32), tree)
  delta = jnp.einsum("bkgtd,bkgtd->bkgt", dout.astype(jnp.float32), out.astype(jnp.float32))
  indices = functools.partial(_indices, blocks, visibility, batch, kv_heads, groups)

  def key_chunk(carry, j):
    (k_blk, v_blk), kv_caps = _chunk((k, v), j, ck, axis=2), _chunk(captured.kv, j, ck)

    def query_chunk(carry, i):
      dq, dq_caps, dbias, dparams, dk_blk, dv_blk, dkv_caps = carry
      q_blk, do_blk, lse_blk, delta_blk, q_caps = _chunk((q, dout, lse, delta, captured.q), i, cq)
      index = indices(i, j)
      # What the block's logits are differentiated wrt: query, key, parameters, bias, captured values.
      inputs = (q_blk, k_blk, params, _pairwise_block(bias, i, j, cq, ck), q_caps, kv_caps)

      def grads(visible):
        s, logits_vjp = jax.vjp(functools.partial(_block_logits, blocks, index, visible), *inputs)
        p = jnp.exp((s if visible is None else jnp.where(visible, s, MASK_VALUE)) - lse_blk[..., None])
        dp = jnp.einsum("bkgqd,bkcd->bkgqc", do_blk, v_blk, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_blk[..., None])
        return (jnp.einsum("bkgqc,bkgqd->bkcd", p, do_blk.astype(jnp.float32)), *f32(logits_vjp(ds)))

      skip = lambda: (jnp.zeros(dv_blk.shape, jnp.float32), *f32_zeros(inputs))

      def partial():
        visible = _visible(blocks, visibility, mask, params, q_caps, kv_caps, index, i, j, kv_heads)
        return lax.cond(jnp.any(visible), lambda: grads(visible), skip)

      dv_j, dq_i, dk_j, dparams_ij, dbias_ij, dq_caps_i, dkv_caps_j = lax.switch(
          kinds[i, j].astype(jnp.int32), (skip, partial, lambda: grads(None)))
      add_at = lambda d, d_i: lax.dynamic_update_slice_in_dim(d, _chunk(d, i, cq) + d_i, i * cq, 3)  # to chunk i
      dq, dq_caps = jax.tree.map(add_at, (dq, dq_caps), (dq_i, dq_caps_i))
      if bias is not None:
        starts = (0, 0, i * cq if dbias.shape[2] > 1 else 0, j * ck if dbias.shape[3] > 1 else 0)
        dbias = lax.dynamic_update_slice(dbias, lax.dynamic_slice(dbias, starts, dbias_ij.shape) + dbias_ij, starts)
      sums = jax.tree.map(jnp.add, (dparams, dk_blk, dv_blk, dkv_caps), (dparams_ij, dk_j, dv_j, dkv_caps_j))
      return (dq, dq_caps, dbias, *sums), None

    (dq, dq_caps, dbias, dparams, dk_blk, dv_blk, dkv_caps), _ = lax.scan(
        query_chunk, (*carry, *f32_zeros((k_blk, v_blk, kv_caps))), jnp.arange(q_len // cq))
    return (dq, dq_caps, dbias, dparams), (dk_blk, dv_blk, dkv_caps)

  init = f32_zeros((q, captured.q, bias, params))
  (dq, dq_caps, dbias, dparams), (dk, dv, dkv_caps) = lax.scan(key_chunk, init, jnp.arange(k.shape[2] // ck))
  unchunk = lambda x: jnp.moveaxis(x, 0, 2).reshape(*x.shape[1:3], -1, x.shape[-1])  # [nk, B, K, ck, D] -> [B, K, S, D]
  dkv_caps = jax.tree.map(lambda x: jnp.moveaxis(x, 0, -2).reshape(*x.shape[1:-1], -1), dkv_caps)
  return (dq, unchunk(dk), unchunk(dv), Captured(dq_caps, dkv_caps), dbias), dparams


def _batch_and_heads(batch: int, kv_heads: int, groups: int) -> tuple[jax.Array, jax.Array]:
  """b `[B, 1, 1, 1, 1]` and h `[1, K, G, 1, 1]` (query head h = k * G + g), int32."""
  heads = jnp.arange(kv_heads * groups, dtype=jnp.int32).reshape(1, kv_heads, groups, 1, 1)
  return jnp.arange(batch, dtype=jnp.int32).reshape(batch, 1, 1, 1, 1), heads


def _indices(blocks: Blocks, visibility: Visibility, batch: int, kv_heads: int, groups: int, i, j) -> tuple:
  """(b, h, q_idx, kv_idx) of block (i, j): int32, broadcastable to `[B, K, G, cq, ck]` (`Mods`)."""
  cq, ck = blocks.query_chunk, blocks.key_chunk
  q_idx = lax.dynamic_slice_in_dim(visibility.q_positions, i * cq, cq, axis=1)[:, None, None, :, None]
  kv_idx = lax.dynamic_slice_in_dim(visibility.kv_positions, j * ck, ck, axis=1)[:, None, None, None, :]
  return (*_batch_and_heads(batch, kv_heads, groups), q_idx, kv_idx)


def _chunk(tree, i, chunk: int, axis: int = 3):
  """Chunk i (of `chunk` tokens) of each array in `tree`, the tokens on `axis` (3: grouped queries, captured
  values, lse; 2: keys and values)."""
  return jax.tree.map(lambda x: lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=axis), tree)


def _visible(blocks: Blocks, visibility: Visibility, mask, params, q_caps, kv_caps, index, i, j,
             kv_heads: int) -> jax.Array:
  """`[B or 1, K or 1, G or 1, cq, ck]` boolean: which keys of chunk j the queries of chunk i see."""
  cq, ck = blocks.query_chunk, blocks.key_chunk
  q_slice = lambda x: lax.dynamic_slice_in_dim(x, i * cq, cq, axis=1)
  kv_slice = lambda x: lax.dynamic_slice_in_dim(x, j * ck, ck, axis=1)
  visible = masks.visible_keys(q_slice(visibility.q_segment_ids), kv_slice(visibility.kv_segment_ids),
                               q_slice(visibility.q_positions), kv_slice(visibility.kv_positions),
                               causal=blocks.causal, window=blocks.window)[:, None, None]
  if mask is not None:
    visible = visible & _grouped(_pairwise_block(mask, i, j, cq, ck), kv_heads)
  if blocks.mods.mask_mod is not None:
    q = {name: x[..., None] for name, x in q_caps.items()}
    kv = {name: x[..., None, :] for name, x in kv_caps.items()}
    visible = visible & blocks.mods.mask_mod(*index, params, q, kv)
  return visible


def _grouped_tokens(x: jax.Array, pad: int, kv_heads: int) -> jax.Array:
  """A per-query-head array `[B, L, H, ...]` (query, output, lse, a captured value) as `[B, K, G, L_padded, ...]`;
  a captured `[B, L]` (shared by the heads) as `[B, 1, 1, L_padded]`. Padded with 0."""
  x = jnp.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 2))
  if x.ndim == 2:
    return x[:, None, None]
  return jnp.moveaxis(x.reshape(*x.shape[:2], kv_heads, -1, *x.shape[3:]), 1, 3)


def _outside(x: jax.Array, length: int) -> jax.Array:
  """Per query chunk `[nq, B, K, G, cq, ...]` -> `[B, L, H, ...]` (`_grouped_tokens` undone)."""
  x = jnp.moveaxis(x, (0, 4), (1, 2))  # [B, nq, cq, K, G, ...]
  return x.reshape(x.shape[0], -1, x.shape[3] * x.shape[4], *x.shape[5:])[:, :length]


def _pairwise(x, name: str, *, shape: tuple, pads: tuple):
  """A mask or bias broadcastable to `[B, H, T, S]` as 4-D, padded along T and S where not broadcast."""
  if x is None:
    return None
  if x.ndim > 4 or any(d not in (1, n) for d, n in zip(x.shape[::-1], shape[::-1])):
    raise ValueError(f"{name} of shape {x.shape} is not broadcastable to [batch, heads, q_len, kv_len] = {shape}")
  x = x.reshape((1,) * (4 - x.ndim) + x.shape)
  return jnp.pad(x, [(0, 0), (0, 0)] + [(0, pad if d > 1 else 0) for d, pad in zip(x.shape[2:], pads)])


def _pairwise_block(x, i, j, cq: int, ck: int) -> jax.Array | None:
  """Block (i, j) of a padded `[B, H, T, S]` pairwise array (broadcast dims stay 1), or None for None."""
  if x is None:
    return None
  starts = (0, 0, i * cq if x.shape[2] > 1 else 0, j * ck if x.shape[3] > 1 else 0)
  return lax.dynamic_slice(x, starts, x.shape[:2] + tuple(min(n, c) for n, c in zip(x.shape[2:], (cq, ck))))


def _grouped(x_BxHxQxC, kv_heads: int) -> jax.Array:
  """`[B, H or 1, q, c]` -> `[B, K, G, q, c]` (or `[B, 1, 1, q, c]`), the grouped-heads layout."""
  if x_BxHxQxC.shape[1] == 1:
    return x_BxHxQxC[:, :, None]
  return x_BxHxQxC.reshape(x_BxHxQxC.shape[0], kv_heads, -1, *x_BxHxQxC.shape[2:])
