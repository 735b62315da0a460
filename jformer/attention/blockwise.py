"""Blockwise softmax attention with an online softmax and a custom VJP: memory linear in the length.

The one engine of the pure-JAX attention paths: `chunked`, the learned similarity functions (`scored`: additive,
general, cosine, ...) and the flex variants (`flex`: a score_mod and a mask_mod) run here. Not a variant itself.

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
computed, mask_mod included, and applied). It is read from per-chunk minima and maxima of segment ids and
positions (exact for packed rows masked by index, as the model trains; elsewhere a block it cannot decide is
PARTIAL, which is always correct) and from the mask_mod's values on each block. What is known when the program is
built (no segment ids, positions by index, a mask_mod of the indices alone) is a constant of the program, the
mask_mod's part evaluated once per shape. So causal attention does about half the work, a window O(T * window), and a mask_mod runs
only on the blocks it partly masks.

Inside, heads come first and are grouped: query `[B, K, G, T, D]` (query head h = k * G + g uses key/value
head k; H = K * G), key/value `[B, K, S, D]`, lengths padded to whole chunks (padding has segment id 0).
A query that sees no key gets an unspecified finite output (the reference gives the mean of the values).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jformer.ops import masks
from jformer.ops.softcap import soft_cap

MASK_VALUE = float(jnp.finfo(jnp.float32).min)
# What `block_kinds` says of a block.
EMPTY, PARTIAL, FULL = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Blocks:
  """Static layout of one call: chunk sizes (the padded lengths are multiples of them), the causal flag, the
  logit soft-cap (0: none) and the sliding window ((left, right), or None)."""
  query_chunk: int
  key_chunk: int
  causal: bool
  softcap: float = 0.0
  window: tuple[int, int] | None = None

  @property
  def by_position(self) -> bool:
    """Whether visibility reads positions (causal masking or a window)."""
    return self.causal or self.window is not None


@dataclasses.dataclass(frozen=True)
class Mods:
  """A flex variant's functions in the engine's calling convention (`jformer.attention.flex` builds them):

      score_mod(score, b, h, q_idx, kv_idx, params, q, kv) -> the new scores (float32, broadcastable to score)
      mask_mod(b, h, q_idx, kv_idx, params, q, kv) -> bool, True = visible

  b, h, q_idx, kv_idx are int32 arrays broadcastable against the block's scores `[B, K, G, cq, ck]` (b the row, h =
  k * G + g the query head, q_idx / kv_idx the positions of queries and keys); `params` the pytree of `attention`;
  q / kv: {name: the captured per-token values at the block's queries `[B, K or 1, G or 1, cq, 1]` / keys
  `[B, K or 1, G or 1, 1, ck]`}. `mask_reads_indices`: the mask_mod reads b, h, q_idx and kv_idx only, so where
  the positions are the index its block mask is evaluated once per shape, when the program is built. Hashable:
  a static argument.
  """
  score_mod: Callable | None = None
  mask_mod: Callable | None = None
  mask_reads_indices: bool = False


class Visibility(NamedTuple):
  """Per-token arrays deciding which key each query sees (`ops.masks.visible_keys`), padded to whole chunks.

  Segment ids are `[B or 1, T_padded]` / `[B or 1, S_padded]` int32 (padding: 0); positions likewise (padding: the
  last position, so per-chunk ranges stay tight). Constants of the program where the call gives none.
  """
  q_segment_ids: jax.Array
  kv_segment_ids: jax.Array
  q_positions: jax.Array
  kv_positions: jax.Array


class Captured(NamedTuple):
  """Per-token values a flex variant's mods read (`Mods`), grouped and padded: {name: `[B, K or 1, G or 1,
  T_padded]`} at the queries, {name: `[B, K or 1, G or 1, S_padded]`} at the keys."""
  q: dict
  kv: dict


# score(q_BxHxQxE, k_BxHxCxE, params) -> logits_BxHxQxC float32; None = q k^T on the (pre-scaled) query.
Score = Callable[..., jax.Array]


def attention(query, key, value, *, causal, q_segment_ids, kv_segment_ids, q_positions, kv_positions, mask, bias,
              query_chunk_size: int, key_chunk_size: int, score: Score | None = None, params=None,
              softcap: float = 0.0, window: tuple[int, int] | None = None, mods: Mods | None = None,
              captures=None) -> jax.Array:
  """softmax(mod(cap(score(Q, K))) + bias) V over the visible keys, chunk by chunk (arguments: the variant
  signature's).

  Args:
    query: `[B, T, H, E]`; key `[B, S, K, E]`, value `[B, S, K, Dv]` with H % K == 0 (K == H with a `score`).
    mask, bias: broadcastable to `[B, H, T, S]`, or None.
    query_chunk_size, key_chunk_size: chunk sizes; T and S are padded up to multiples of them.
    score: `score(q [B, H, cq, E], k [B, H, ck, E], params) -> [B, H, cq, ck]` float32, a module-level
      function (it is a static argument); None = Q K^T / sqrt(E) (paper eq. 1).
    params: the pytree `score` and the mods read (differentiated like query and key), or None.
    softcap: > 0: the scores become softcap * tanh(score / softcap) before the bias (`ops.softcap`); 0: off.
    window: (left, right): the sliding window of the variant signature (`ops.masks.window_mask`); None: none.
      Blocks wholly outside it are skipped, so the work is O(T * window), not O(T * S).
    mods: a flex variant's score_mod and mask_mod (`Mods`), or None.
    captures: {"q": {name: `[B, T, H]` or `[B, T]`}, "kv": {name: `[B, S, H]` or `[B, S]`}}, float: the per-token
      values the mods read (differentiated), or None.

  Returns:
    `[B, T, H, Dv]`.
  """
  batch, q_len, heads, head_dim = query.shape
  kv_len, kv_heads = key.shape[1:3]
  if score is not None and kv_heads != heads:
    raise ValueError(f"a score function needs as many key/value heads as query heads, got {kv_heads} and {heads} "
                     "(the registry repeats key/value heads for a variant that does not declare 'gqa')")
  if score is None:  # scale once here; the blocks compute plain q k^T.
    query = query * jnp.asarray(head_dim**-0.5, query.dtype)
  q_pad, kv_pad = -q_len % query_chunk_size, -kv_len % key_chunk_size
  with jax.ensure_compile_time_eval():  # what the call does not give stays a constant of the program.
    visibility = Visibility(_pad(_segments(q_segment_ids, q_len), q_pad),
                            _pad(_segments(kv_segment_ids, kv_len), kv_pad),
                            _pad(_positions(q_positions, q_len), q_pad, "edge"),
                            _pad(_positions(kv_positions, kv_len), kv_pad, "edge"))
  captured = Captured(*({name: _grouped_tokens(x, pad, kv_heads) for name, x in (captures or {}).get(side, {}).items()}
                        for side, pad in (("q", q_pad), ("kv", kv_pad))))
  query = jnp.pad(query, ((0, 0), (0, q_pad), (0, 0), (0, 0)))
  q_BxKxGxTxD = query.reshape(batch, q_len + q_pad, kv_heads, heads // kv_heads, head_dim).transpose(0, 2, 3, 1, 4)
  k_BxKxSxD, v_BxKxSxD = (jnp.pad(x, ((0, 0), (0, kv_pad), (0, 0), (0, 0))).transpose(0, 2, 1, 3)
                          for x in (key, value))
  pairwise = functools.partial(_pairwise, shape=(batch, heads, q_len, kv_len), pads=(q_pad, kv_pad))
  layout = Blocks(query_chunk_size, key_chunk_size, causal, float(softcap),
                  None if window is None else (int(window[0]), int(window[1])))
  mask = pairwise(mask, "mask")
  kinds = block_kinds(layout, mods, visibility, mask, params, captured, batch=batch, kv_heads=kv_heads,
                      groups=heads // kv_heads, lengths=(q_len, kv_len))
  out_BxKxGxTxD = _attend(layout, score, mods, q_BxKxGxTxD, k_BxKxSxD, v_BxKxSxD, params, captured, visibility, mask,
                          pairwise(bias, "bias"), kinds)
  return out_BxKxGxTxD.transpose(0, 3, 1, 2, 4).reshape(batch, q_len + q_pad, heads, -1)[:, :q_len]


def block_kinds(blocks: Blocks, mods: Mods | None, visibility: Visibility, mask, params, captured: Captured, *,
                batch: int, kv_heads: int, groups: int, lengths: tuple[int, int]) -> jax.Array:
  """The block mask: `[T_padded / cq, S_padded / ck]` int8, EMPTY, PARTIAL or FULL per block (module doc).

  Each part of the visibility says, per row of the batch, which blocks it leaves empty and which it leaves full;
  a block is EMPTY where one part empties it in every row, FULL where every part fills it in every row. A concrete
  array (a constant of the program) when the call gives neither segment ids nor positions and the mask_mod reads
  the indices only; a `mask` makes no block FULL (its emptiness is left to the block's own test).
  """
  with jax.ensure_compile_time_eval():
    parts = [_segment_blocks(blocks, visibility)]
    if blocks.by_position:
      parts.append(_position_blocks(blocks, visibility))
    if mods is not None and mods.mask_mod is not None:
      if mods.mask_reads_indices and not any(isinstance(p, jax.core.Tracer) for p in visibility[2:]):
        parts.append(_index_mod_blocks(mods, blocks, batch, kv_heads, groups, *lengths))
      else:
        parts.append(_mod_blocks(mods, blocks, visibility.q_positions, visibility.kv_positions, params, captured,
                                 batch, kv_heads, groups))
    empty = functools.reduce(jnp.logical_or, [e for e, _ in parts]).all(0)
    full = functools.reduce(jnp.logical_and, [f for _, f in parts]).all(0) & (mask is None)
    return jnp.where(empty, EMPTY, jnp.where(full, FULL, PARTIAL)).astype(jnp.int8)


def _chunk_ranges(x_BxL: jax.Array, chunk: int) -> tuple[jax.Array, jax.Array]:
  """Per chunk of `chunk` tokens: (minimum, maximum), each `[B, L / chunk]`."""
  chunks = x_BxL.reshape(x_BxL.shape[0], -1, chunk)
  return chunks.min(-1), chunks.max(-1)


def _segment_blocks(blocks: Blocks, visibility: Visibility) -> tuple[jax.Array, jax.Array]:
  """(empty, full) `[B or 1, nq, nk]` by segment ids (ids >= 0, 0 = padding): empty where the id ranges of the
  chunks are disjoint or one chunk is all padding; full where both chunks hold one and the same non-zero id."""
  (q_lo, q_hi), (kv_lo, kv_hi) = (_chunk_ranges(x, c) for x, c in (
      (visibility.q_segment_ids, blocks.query_chunk), (visibility.kv_segment_ids, blocks.key_chunk)))
  q_lo, q_hi, kv_lo, kv_hi = q_lo[:, :, None], q_hi[:, :, None], kv_lo[:, None], kv_hi[:, None]
  empty = (q_hi < kv_lo) | (kv_hi < q_lo) | (q_hi == 0) | (kv_hi == 0)
  return empty, (q_lo == q_hi) & (kv_lo == kv_hi) & (q_lo == kv_lo) & (q_lo != 0)


def _position_blocks(blocks: Blocks, visibility: Visibility) -> tuple[jax.Array, jax.Array]:
  """(empty, full) `[B or 1, nq, nk]` by the causal rule and the window, from the chunks' position ranges."""
  (q_lo, q_hi), (kv_lo, kv_hi) = (_chunk_ranges(x, c) for x, c in (
      (visibility.q_positions, blocks.query_chunk), (visibility.kv_positions, blocks.key_chunk)))
  q_lo, q_hi, kv_lo, kv_hi = q_lo[:, :, None], q_hi[:, :, None], kv_lo[:, None], kv_hi[:, None]
  empty, full = jnp.zeros((), bool), jnp.ones((), bool)
  if blocks.causal:
    empty, full = empty | (kv_lo > q_hi), full & (kv_hi <= q_lo)
  if blocks.window is not None:
    left, right = blocks.window
    empty = empty | (kv_hi < q_lo - left) | (kv_lo > q_hi + right)
    full = full & (kv_lo >= q_hi - left) & (kv_hi <= q_lo + right)
  return empty, full


@functools.lru_cache(maxsize=64)
def _index_mod_blocks(mods: Mods, blocks: Blocks, batch: int, kv_heads: int, groups: int, q_len: int,
                      kv_len: int) -> tuple[jax.Array, jax.Array]:
  """`_mod_blocks` where positions are the index: evaluated once per shape, when the program is built."""
  with jax.ensure_compile_time_eval():
    q_pad, kv_pad = -q_len % blocks.query_chunk, -kv_len % blocks.key_chunk
    return _mod_blocks(mods, blocks, _pad(_positions(None, q_len), q_pad, "edge"),
                       _pad(_positions(None, kv_len), kv_pad, "edge"), None, Captured({}, {}), batch, kv_heads,
                       groups)


def _mod_blocks(mods: Mods, blocks: Blocks, q_positions, kv_positions, params, captured: Captured, batch: int,
                kv_heads: int, groups: int) -> tuple[jax.Array, jax.Array]:
  """(empty, full) `[B or 1, nq, nk]` by the mask_mod, evaluated on one chunk of queries against all keys at a
  time (memory cq x S), every head of a row reduced together."""
  cq, ck = blocks.query_chunk, blocks.key_chunk
  kv_len = kv_positions.shape[1]
  b, h = _batch_and_heads(batch, kv_heads, groups)
  kv_idx = kv_positions[:, None, None, None, :]
  kv = {name: x[..., None, :] for name, x in captured.kv.items()}

  def query_chunk(i):
    q_idx = lax.dynamic_slice_in_dim(q_positions, i * cq, cq, axis=1)[:, None, None, :, None]
    q = {name: lax.dynamic_slice_in_dim(x, i * cq, cq, axis=3)[..., None] for name, x in captured.q.items()}
    visible = jnp.asarray(mods.mask_mod(b, h, q_idx, kv_idx, params, q, kv))
    visible = jnp.broadcast_to(visible, jnp.broadcast_shapes(visible.shape, (1, 1, 1, cq, kv_len)))
    visible = visible.reshape(visible.shape[0], -1, cq, kv_len // ck, ck)
    return visible.any((1, 2, 4)), visible.all((1, 2, 4))

  seen, all_seen = lax.map(query_chunk, jnp.arange(q_positions.shape[1] // cq))  # [nq, B or 1, nk]
  return ~jnp.swapaxes(seen, 0, 1), jnp.swapaxes(all_seen, 0, 1)


def scan_forward(blocks: Blocks, score: Score | None, mods: Mods | None, q, k, v, params, captured: Captured,
                 visibility: Visibility, mask, bias, kinds):
  """The forward pass in pure JAX: `lax.map` over query chunks, `lax.scan` over key chunks, each block run as its
  kind says (`block_kinds`).

  Returns (out `[B, K, G, T, Dv]` in the query dtype, lse `[B, K, G, T]` float32).
  """
  batch, kv_heads, groups, q_len, _ = q.shape
  cq, ck = blocks.query_chunk, blocks.key_chunk
  # Masking inputs tied to the query: under a scan over layers they are loop-invariant, and JAX's partial evaluation
  # would hoist all that depends on them alone out of the loop, every block's visibility stacked (the [T, S] mask).
  q, visibility, mask, kinds = lax.optimization_barrier((q, visibility, mask, kinds))
  indices = functools.partial(_indices, blocks, visibility, batch, kv_heads, groups)

  def query_chunk(i):
    q_blk = lax.dynamic_slice_in_dim(q, i * cq, cq, axis=3)
    q_caps = _token_chunk(captured.q, i, cq)

    def key_chunk(carry, j):
      k_blk, v_blk = (lax.dynamic_slice_in_dim(x, j * ck, ck, axis=2) for x in (k, v))
      kv_caps = _token_chunk(captured.kv, j, ck)
      index = indices(i, j)

      def attend(carry, visible):
        m, l, acc = carry
        s = _block_logits(blocks, score, mods, index, visible, q_blk, k_blk, params, _bias_block(bias, i, j, cq, ck),
                          q_caps, kv_caps)
        s = s if visible is None else jnp.where(visible, s, MASK_VALUE)
        m_new = jnp.maximum(m, s.max(-1))
        correction = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[..., None])
        pv = jnp.einsum("bkgqc,bkcd->bkgqd", p.astype(v.dtype), v_blk, preferred_element_type=jnp.float32)
        return m_new, correction * l + p.sum(-1), correction[..., None] * acc + pv

      def partial(carry):
        visible = _visible(blocks, mods, visibility, mask, params, q_caps, kv_caps, index, i, j, kv_heads)
        return lax.cond(jnp.any(visible), functools.partial(attend, visible=visible), lambda c: c, carry)

      branches = (lambda c: c, partial, functools.partial(attend, visible=None))
      return lax.switch(kinds[i, j].astype(jnp.int32), branches, carry), None

    init = (jnp.full((batch, kv_heads, groups, cq), MASK_VALUE), jnp.zeros((batch, kv_heads, groups, cq)),
            jnp.zeros((batch, kv_heads, groups, cq, v.shape[-1])))
    (m, l, acc), _ = lax.scan(key_chunk, init, jnp.arange(k.shape[2] // ck))
    l = jnp.where(l > 0, l, 1.0)  # 0 only where every block was skipped: no visible key at all.
    return (acc / l[..., None]).astype(q.dtype), m + jnp.log(l)

  out, lse = lax.map(query_chunk, jnp.arange(q_len // cq))
  return (jnp.moveaxis(out, 0, 3).reshape(batch, kv_heads, groups, q_len, -1),
          jnp.moveaxis(lse, 0, 3).reshape(batch, kv_heads, groups, q_len))


def _scores(blocks: Blocks, score: Score | None, q_blk, k_blk, params) -> jax.Array:
  """`[B, K, G, cq, ck]` float32 logits of one block: q k^T, or `score` per head (G = 1 then); soft-capped."""
  if score is None:
    s = jnp.einsum("bkgqd,bkcd->bkgqc", q_blk, k_blk, preferred_element_type=jnp.float32)
  else:
    s = score(q_blk[:, :, 0], k_blk, params).astype(jnp.float32)[:, :, None]
  return soft_cap(s, blocks.softcap)


def _block_logits(blocks: Blocks, score: Score | None, mods: Mods | None, index, visible, q_blk, k_blk, params,
                  bias_blk, q_caps, kv_caps) -> jax.Array:
  """`[B, K, G, cq, ck]` float32: mod(cap(score)) + bias of one block, before masking: a function of everything
  the backward differentiates (query, key, parameters, bias and captured values of the block). The score_mod sees
  the indices and captured values of a visible pair where `visible` (None: all) masks one (`visible_arguments`)."""
  s = _scores(blocks, score, q_blk, k_blk, params)
  if mods is not None and mods.score_mod is not None:
    q = {name: x[..., None] for name, x in q_caps.items()}
    kv = {name: x[..., None, :] for name, x in kv_caps.items()}
    index, q, kv = visible_arguments(visible, (index, q, kv))
    s = jnp.broadcast_to(mods.score_mod(s, *index, params, q, kv), s.shape).astype(jnp.float32)
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


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _attend(blocks, score, mods, q, k, v, params, captured, visibility, mask, bias, kinds):
  return scan_forward(blocks, score, mods, q, k, v, params, captured, visibility, mask, bias, kinds)[0]


def _attend_forward(blocks, score, mods, q, k, v, params, captured, visibility, mask, bias, kinds):
  out, lse = scan_forward(blocks, score, mods, q, k, v, params, captured, visibility, mask, bias, kinds)
  return out, (q, k, v, params, captured, visibility, mask, bias, kinds, out, lse)


def _backward(blocks, score, mods, residuals, dout):
  """Gradients wrt q, k, v, params, the captured values and the bias in one pass: `lax.scan` over key chunks,
  inner `lax.scan` over query chunks, each block run as its kind says."""
  q, k, v, params, captured, visibility, mask, bias, kinds, out, lse = residuals
  batch, kv_heads, groups, q_len = q.shape[:4]
  cq, ck = blocks.query_chunk, blocks.key_chunk
  f32_zeros = lambda tree: jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), tree)
  f32 = lambda tree: jax.tree.map(lambda x: x.astype(jnp.float32), tree)
  delta = jnp.einsum("bkgtd,bkgtd->bkgt", dout.astype(jnp.float32), out.astype(jnp.float32))
  indices = functools.partial(_indices, blocks, visibility, batch, kv_heads, groups)

  def key_chunk(carry, j):
    k_blk, v_blk = (lax.dynamic_slice_in_dim(x, j * ck, ck, axis=2) for x in (k, v))
    kv_caps = _token_chunk(captured.kv, j, ck)

    def query_chunk(carry, i):
      dq, dparams, dq_caps, dbias, dk_blk, dv_blk, dkv_caps = carry
      q_blk, do_blk = (lax.dynamic_slice_in_dim(x, i * cq, cq, axis=3) for x in (q, dout))
      lse_blk, delta_blk = (lax.dynamic_slice_in_dim(x, i * cq, cq, axis=3) for x in (lse, delta))
      q_caps = _token_chunk(captured.q, i, cq)
      index = indices(i, j)
      # What the block's logits are differentiated wrt: query, key, parameters, bias, captured values.
      inputs = (q_blk, k_blk, params, _bias_block(bias, i, j, cq, ck), q_caps, kv_caps)

      def grads(visible):
        s, logits_vjp = jax.vjp(functools.partial(_block_logits, blocks, score, mods, index, visible), *inputs)
        p = jnp.exp((s if visible is None else jnp.where(visible, s, MASK_VALUE)) - lse_blk[..., None])
        dp = jnp.einsum("bkgqd,bkcd->bkgqc", do_blk, v_blk, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_blk[..., None])
        return (jnp.einsum("bkgqc,bkgqd->bkcd", p, do_blk.astype(jnp.float32)), *f32(logits_vjp(ds)))

      skip = lambda: (jnp.zeros(dv_blk.shape, jnp.float32), *f32_zeros(inputs))

      def partial():
        visible = _visible(blocks, mods, visibility, mask, params, q_caps, kv_caps, index, i, j, kv_heads)
        return lax.cond(jnp.any(visible), lambda: grads(visible), skip)

      dv_j, dq_i, dk_j, dparams_ij, dbias_ij, dq_caps_i, dkv_caps_j = lax.switch(
          kinds[i, j].astype(jnp.int32), (skip, partial, lambda: grads(None)))
      dparams = jax.tree.map(jnp.add, dparams, dparams_ij)
      dq = _add_at(dq, dq_i, i * cq, axis=3)
      dq_caps = jax.tree.map(lambda d, d_i: _add_at(d, d_i, i * cq, axis=3), dq_caps, dq_caps_i)
      if bias is not None:
        starts = (0, 0, i * cq if dbias.shape[2] > 1 else 0, j * ck if dbias.shape[3] > 1 else 0)
        dbias = lax.dynamic_update_slice(dbias, lax.dynamic_slice(dbias, starts, dbias_ij.shape) + dbias_ij, starts)
      dkv_caps = jax.tree.map(jnp.add, dkv_caps, dkv_caps_j)
      return (dq, dparams, dq_caps, dbias, dk_blk + dk_j, dv_blk + dv_j, dkv_caps), None

    dq, dparams, dq_caps, dbias = carry
    init = (dq, dparams, dq_caps, dbias, jnp.zeros(k_blk.shape, jnp.float32), jnp.zeros(v_blk.shape, jnp.float32),
            f32_zeros(kv_caps))
    (dq, dparams, dq_caps, dbias, dk_blk, dv_blk, dkv_caps), _ = lax.scan(query_chunk, init, jnp.arange(q_len // cq))
    return (dq, dparams, dq_caps, dbias), (dk_blk, dv_blk, dkv_caps)

  init = (jnp.zeros(q.shape, jnp.float32), f32_zeros(params), f32_zeros(captured.q),
          None if bias is None else jnp.zeros(bias.shape, jnp.float32))
  (dq, dparams, dq_caps, dbias), (dk, dv, dkv_caps) = lax.scan(key_chunk, init, jnp.arange(k.shape[2] // ck))
  unchunk = lambda x: jnp.moveaxis(x, 0, 2).reshape(*x.shape[1:3], -1, x.shape[-1])  # [nk, B, K, ck, D] -> [B, K, S, D]
  cast_like = lambda grads, primals: jax.tree.map(lambda d, x: d.astype(x.dtype), grads, primals)
  dkv_caps = jax.tree.map(lambda x: jnp.moveaxis(x, 0, -2).reshape(*x.shape[1:-1], -1), dkv_caps)
  return (dq.astype(q.dtype), unchunk(dk).astype(k.dtype), unchunk(dv).astype(v.dtype), cast_like(dparams, params),
          Captured(cast_like(dq_caps, captured.q), cast_like(dkv_caps, captured.kv)), None, None,
          None if bias is None else dbias.astype(bias.dtype), None)


_attend.defvjp(_attend_forward, _backward)
# The backward pass from given residuals, for engines that run the passes block by block with their own merging
# (`jformer.attention.context_parallel`'s ring: the merged output and log-sum-exp of all blocks).
backward = _backward


def _add_at(total: jax.Array, part: jax.Array, start, axis: int) -> jax.Array:
  """`total` with `part` added to its slice at `start` along `axis`."""
  size = part.shape[axis]
  return lax.dynamic_update_slice_in_dim(total, lax.dynamic_slice_in_dim(total, start, size, axis) + part, start,
                                         axis)


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


def _token_chunk(values: dict, i, chunk: int) -> dict:
  """{name: chunk i of a grouped per-token array `[B, K or 1, G or 1, L]`}."""
  return {name: lax.dynamic_slice_in_dim(x, i * chunk, chunk, axis=3) for name, x in values.items()}


def _visible(blocks: Blocks, mods: Mods | None, visibility: Visibility, mask, params, q_caps, kv_caps, index, i, j,
             kv_heads: int) -> jax.Array:
  """`[B or 1, K or 1, G or 1, cq, ck]` boolean: which keys of chunk j the queries of chunk i see."""
  cq, ck = blocks.query_chunk, blocks.key_chunk
  q_slice = lambda x: lax.dynamic_slice_in_dim(x, i * cq, cq, axis=1)
  kv_slice = lambda x: lax.dynamic_slice_in_dim(x, j * ck, ck, axis=1)
  positions = ((q_slice(visibility.q_positions), kv_slice(visibility.kv_positions)) if blocks.by_position
               else (None, None))
  visible = masks.visible_keys(q_slice(visibility.q_segment_ids), kv_slice(visibility.kv_segment_ids),
                               *positions, causal=blocks.causal, window=blocks.window)[:, None, None]
  if mask is not None:
    visible = visible & _grouped(_pairwise_block(mask, i, j, cq, ck), kv_heads)
  if mods is not None and mods.mask_mod is not None:
    q = {name: x[..., None] for name, x in q_caps.items()}
    kv = {name: x[..., None, :] for name, x in kv_caps.items()}
    visible = visible & mods.mask_mod(*index, params, q, kv)
  return visible


def _segments(segment_ids, length: int) -> jax.Array:
  return jnp.ones((1, length), jnp.int32) if segment_ids is None else jnp.asarray(segment_ids, jnp.int32)


def _positions(positions, length: int) -> jax.Array:
  return jnp.arange(length, dtype=jnp.int32)[None] if positions is None else jnp.atleast_2d(positions).astype(
      jnp.int32)


def _pad(x_BxL: jax.Array, pad: int, mode: str = "constant") -> jax.Array:
  """Padded to whole chunks along the length: with 0 (segment ids: padding), or the last value ("edge")."""
  return jnp.pad(x_BxL, ((0, 0), (0, pad)), mode=mode)


def _grouped_tokens(x: jax.Array, pad: int, kv_heads: int) -> jax.Array:
  """A captured per-token array `[B, L, H]` (or `[B, L]`, shared by the heads) as `[B, K, G, L_padded]` (or
  `[B, 1, 1, L_padded]`)."""
  x = jnp.pad(x, ((0, 0), (0, pad)) + ((0, 0),) * (x.ndim - 2))
  if x.ndim == 2:
    return x[:, None, None]
  return jnp.moveaxis(x, 2, 1).reshape(x.shape[0], kv_heads, -1, x.shape[1])


def _pairwise(x, name: str, *, shape: tuple, pads: tuple):
  """A mask or bias broadcastable to `[B, H, T, S]` as 4-D, padded along T and S where not broadcast."""
  if x is None:
    return None
  if x.ndim > 4 or any(d not in (1, n) for d, n in zip(x.shape[::-1], shape[::-1])):
    raise ValueError(f"{name} of shape {x.shape} is not broadcastable to [batch, heads, q_len, kv_len] = {shape}")
  x = x.reshape((1,) * (4 - x.ndim) + x.shape)
  return jnp.pad(x, [(0, 0), (0, 0)] + [(0, pad if d > 1 else 0) for d, pad in zip(x.shape[2:], pads)])


def _block_shape(shape: tuple, cq: int, ck: int) -> tuple:
  return shape[:2] + (cq if shape[2] > 1 else 1, ck if shape[3] > 1 else 1)


def _pairwise_block(x, i, j, cq: int, ck: int) -> jax.Array:
  """Block (i, j) of a padded `[B, H, T, S]` pairwise array (broadcast dims stay 1)."""
  starts = (0, 0, i * cq if x.shape[2] > 1 else 0, j * ck if x.shape[3] > 1 else 0)
  return lax.dynamic_slice(x, starts, _block_shape(x.shape, cq, ck))


def _bias_block(bias, i, j, cq: int, ck: int):
  return None if bias is None else _pairwise_block(bias, i, j, cq, ck)


def _grouped(x_BxHxQxC, kv_heads: int) -> jax.Array:
  """`[B, H or 1, q, c]` -> `[B, K, G, q, c]` (or `[B, 1, 1, q, c]`), the grouped-heads layout."""
  if x_BxHxQxC.shape[1] == 1:
    return x_BxHxQxC[:, :, None]
  return x_BxHxQxC.reshape(x_BxHxQxC.shape[0], kv_heads, -1, *x_BxHxQxC.shape[2:])
