"""Blockwise softmax attention with an online softmax and a custom VJP: memory linear in the length.

Shared by the `chunked` variant and the learned similarity functions (`scored`: additive, general, cosine,
...). Not a variant itself.

Forward (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023), for query chunk i over key chunks j:
    s_ij = score(q_i, k_j) + bias_ij           (invisible pairs: MASK_VALUE)
    m_i <- max(m_i, rowmax s_ij),   a = e^(m_i_old - m_i)
    l_i <- a l_i + rowsum e^(s_ij - m_i),   acc_i <- a acc_i + e^(s_ij - m_i) v_j
    out_i = acc_i / l_i,   lse_i = m_i + log l_i       (the logsumexp, kept for the backward)
Backward, recomputing p_ij = e^(s_ij - lse_i) block by block, with Delta_i = rowsum(dout_i * out_i):
    dv_j += p_ij^T dout_i,   ds_ij = p_ij * (dout_i v_j^T - Delta_i),
    (dq_i, dk_j, dparams) += vjp of score at (q_i, k_j) applied to ds_ij,   dbias_ij = ds_ij (summed where broadcast).
The score is q k^T / sqrt(d) (paper eq. 1) unless a `score` function is given, soft-capped (cap * tanh(s / cap),
Gemma 2) when a cap is given, which the backward differentiates with the score: then any differentiable
`score(q [B, H, cq, E], k [B, H, ck, E], params) -> [B, H, cq, ck]` works, its parameters get their gradient
here, and only one block of its intermediates (e.g. additive attention's `[B, H, cq, ck, hidden]`) is ever held.
Blocks where no query sees any key (other segments, the causal future, outside a sliding window, padding,
unfilled cache slots) are skipped in both passes, so causal attention does about half the work and windowed
attention O(T * window).

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


class Visibility(NamedTuple):
  """Per-token arrays deciding which key each query sees (`ops.masks.visible_keys`), padded to whole chunks.

  Segment ids are `[B or 1, T_padded]` / `[B or 1, S_padded]` int32 (padding: 0); positions likewise (read
  only when causal or windowed).
  """
  q_segment_ids: jax.Array
  kv_segment_ids: jax.Array
  q_positions: jax.Array
  kv_positions: jax.Array


# score(q_BxHxQxE, k_BxHxCxE, params) -> logits_BxHxQxC float32; None = q k^T on the (pre-scaled) query.
Score = Callable[..., jax.Array]


def attention(query, key, value, *, causal, q_segment_ids, kv_segment_ids, q_positions, kv_positions, mask, bias,
              query_chunk_size: int, key_chunk_size: int, score: Score | None = None, params=None,
              softcap: float = 0.0, window: tuple[int, int] | None = None) -> jax.Array:
  """softmax(cap(score(Q, K)) + bias) V over the visible keys, chunk by chunk (arguments: the variant signature).

  Args:
    query: `[B, T, H, E]`; key `[B, S, K, E]`, value `[B, S, K, Dv]` with H % K == 0 (K == H with a `score`).
    mask, bias: broadcastable to `[B, H, T, S]`, or None.
    query_chunk_size, key_chunk_size: chunk sizes; T and S are padded up to multiples of them.
    score: `score(q [B, H, cq, E], k [B, H, ck, E], params) -> [B, H, cq, ck]` float32, a module-level
      function (it is a static argument); None = Q K^T / sqrt(E) (paper eq. 1).
    params: the pytree `score` reads (differentiated like query and key), or None.
    softcap: > 0: the scores become softcap * tanh(score / softcap) before the bias (`ops.softcap`); 0: off.
    window: (left, right): the sliding window of the variant signature (`ops.masks.window_mask`); None: none.
      Blocks wholly outside it are skipped, so the work is O(T * window), not O(T * S).

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
  visibility = Visibility(_pad_tokens(_segments(q_segment_ids, q_len), q_pad),
                          _pad_tokens(_segments(kv_segment_ids, kv_len), kv_pad),
                          _pad_tokens(_positions(q_positions, q_len), q_pad),
                          _pad_tokens(_positions(kv_positions, kv_len), kv_pad))
  query = jnp.pad(query, ((0, 0), (0, q_pad), (0, 0), (0, 0)))
  q_BxKxGxTxD = query.reshape(batch, q_len + q_pad, kv_heads, heads // kv_heads, head_dim).transpose(0, 2, 3, 1, 4)
  k_BxKxSxD, v_BxKxSxD = (jnp.pad(x, ((0, 0), (0, kv_pad), (0, 0), (0, 0))).transpose(0, 2, 1, 3)
                          for x in (key, value))
  pairwise = functools.partial(_pairwise, shape=(batch, heads, q_len, kv_len), pads=(q_pad, kv_pad))
  layout = Blocks(query_chunk_size, key_chunk_size, causal, float(softcap),
                  None if window is None else (int(window[0]), int(window[1])))
  out_BxKxGxTxD = _attend(layout, score,
                          q_BxKxGxTxD, k_BxKxSxD, v_BxKxSxD, params, visibility, pairwise(mask, "mask"),
                          pairwise(bias, "bias"))
  return out_BxKxGxTxD.transpose(0, 3, 1, 2, 4).reshape(batch, q_len + q_pad, heads, -1)[:, :q_len]


def scan_forward(blocks: Blocks, score: Score | None, q, k, v, params, visibility: Visibility, mask, bias):
  """The forward pass in pure JAX: `lax.map` over query chunks, `lax.scan` over key chunks.

  Returns (out `[B, K, G, T, Dv]` in the query dtype, lse `[B, K, G, T]` float32).
  """
  batch, kv_heads, groups, q_len, _ = q.shape
  cq, ck = blocks.query_chunk, blocks.key_chunk

  def query_chunk(i):
    q_blk = lax.dynamic_slice_in_dim(q, i * cq, cq, axis=3)

    def key_chunk(carry, j):
      k_blk, v_blk = (lax.dynamic_slice_in_dim(x, j * ck, ck, axis=2) for x in (k, v))
      visible = _visible(blocks, visibility, mask, i, j, kv_heads)

      def attend(carry):
        m, l, acc = carry
        s = _logits(blocks, _scores(blocks, score, q_blk, k_blk, params), bias, visible, i, j)
        m_new = jnp.maximum(m, s.max(-1))
        correction = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[..., None])
        pv = jnp.einsum("bkgqc,bkcd->bkgqd", p.astype(v.dtype), v_blk, preferred_element_type=jnp.float32)
        return m_new, correction * l + p.sum(-1), correction[..., None] * acc + pv

      return lax.cond(jnp.any(visible), attend, lambda c: c, carry), None

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


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _attend(blocks, score, q, k, v, params, visibility, mask, bias):
  return scan_forward(blocks, score, q, k, v, params, visibility, mask, bias)[0]


def _attend_forward(blocks, score, q, k, v, params, visibility, mask, bias):
  out, lse = scan_forward(blocks, score, q, k, v, params, visibility, mask, bias)
  return out, (q, k, v, params, visibility, mask, bias, out, lse)


def _backward(blocks, score, residuals, dout):
  """Gradients wrt q, k, v, params (and bias) in one pass: `lax.scan` over key chunks, inner `lax.scan` over
  query chunks."""
  q, k, v, params, visibility, mask, bias, out, lse = residuals
  kv_heads, q_len = q.shape[1], q.shape[3]
  cq, ck = blocks.query_chunk, blocks.key_chunk
  f32_zeros = lambda tree: jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), tree)
  delta = jnp.einsum("bkgtd,bkgtd->bkgt", dout.astype(jnp.float32), out.astype(jnp.float32))

  def key_chunk(carry, j):
    k_blk, v_blk = (lax.dynamic_slice_in_dim(x, j * ck, ck, axis=2) for x in (k, v))

    def query_chunk(carry, i):
      dq, dparams, dbias, dk_blk, dv_blk = carry
      q_blk, do_blk = (lax.dynamic_slice_in_dim(x, i * cq, cq, axis=3) for x in (q, dout))
      lse_blk, delta_blk = (lax.dynamic_slice_in_dim(x, i * cq, cq, axis=3) for x in (lse, delta))
      visible = _visible(blocks, visibility, mask, i, j, kv_heads)

      def grads(_):
        scores, score_vjp = jax.vjp(functools.partial(_scores, blocks, score), q_blk, k_blk, params)
        p = jnp.exp(_logits(blocks, scores, bias, visible, i, j) - lse_blk[..., None])
        dp = jnp.einsum("bkgqd,bkcd->bkgqc", do_blk, v_blk, preferred_element_type=jnp.float32)
        ds = p * (dp - delta_blk[..., None])
        dq_i, dk_j, dparams_ij = score_vjp(ds)
        return (dq_i.astype(jnp.float32), dk_j.astype(jnp.float32),
                jnp.einsum("bkgqc,bkgqd->bkcd", p, do_blk.astype(jnp.float32)), f32_zeros(params) if
                dparams_ij is None else jax.tree.map(lambda x: x.astype(jnp.float32), dparams_ij),
                None if bias is None else _sum_to(ds.reshape(ds.shape[0], -1, cq, ck), dbias.shape, cq, ck))

      def skip(_):
        zeros = lambda shape: jnp.zeros(shape, jnp.float32)
        return (zeros(q_blk.shape), zeros(dk_blk.shape), zeros(dv_blk.shape), f32_zeros(params),
                None if bias is None else zeros(_block_shape(dbias.shape, cq, ck)))

      dq_i, dk_j, dv_j, dparams_ij, dbias_ij = lax.cond(jnp.any(visible), grads, skip, None)
      dparams = jax.tree.map(jnp.add, dparams, dparams_ij)
      dq = lax.dynamic_update_slice_in_dim(dq, lax.dynamic_slice_in_dim(dq, i * cq, cq, axis=3) + dq_i, i * cq,
                                           axis=3)
      if bias is not None:
        starts = (0, 0, i * cq if dbias.shape[2] > 1 else 0, j * ck if dbias.shape[3] > 1 else 0)
        dbias = lax.dynamic_update_slice(dbias, lax.dynamic_slice(dbias, starts, dbias_ij.shape) + dbias_ij, starts)
      return (dq, dparams, dbias, dk_blk + dk_j, dv_blk + dv_j), None

    dq, dparams, dbias = carry
    init = (dq, dparams, dbias, jnp.zeros(k_blk.shape, jnp.float32), jnp.zeros(v_blk.shape, jnp.float32))
    (dq, dparams, dbias, dk_blk, dv_blk), _ = lax.scan(query_chunk, init, jnp.arange(q_len // cq))
    return (dq, dparams, dbias), (dk_blk, dv_blk)

  init = (jnp.zeros(q.shape, jnp.float32), f32_zeros(params),
          None if bias is None else jnp.zeros(bias.shape, jnp.float32))
  (dq, dparams, dbias), (dk, dv) = lax.scan(key_chunk, init, jnp.arange(k.shape[2] // ck))
  unchunk = lambda x: jnp.moveaxis(x, 0, 2).reshape(x.shape[1], x.shape[2], -1, x.shape[-1])
  dparams = jax.tree.map(lambda d, p: d.astype(p.dtype), dparams, params)
  return (dq.astype(q.dtype), unchunk(dk).astype(k.dtype), unchunk(dv).astype(v.dtype), dparams, None, None,
          None if bias is None else dbias.astype(bias.dtype))


_attend.defvjp(_attend_forward, _backward)
# The backward pass from given residuals, for engines that run the passes block by block with their own merging
# (`jformer.attention.context_parallel`'s ring: the merged output and log-sum-exp of all blocks).
backward = _backward


def _visible(blocks: Blocks, visibility: Visibility, mask, i, j, kv_heads: int) -> jax.Array:
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
  return visible


def _logits(blocks: Blocks, s, bias, visible, i, j) -> jax.Array:
  """`[B, K, G, cq, ck]` float32: the scores `s` of block (i, j) + bias, MASK_VALUE where not visible."""
  if bias is not None:
    s = s + _grouped(_pairwise_block(bias, i, j, blocks.query_chunk, blocks.key_chunk), s.shape[1])
  return jnp.where(visible, s, MASK_VALUE)


def _segments(segment_ids, length: int) -> jax.Array:
  return jnp.ones((1, length), jnp.int32) if segment_ids is None else jnp.asarray(segment_ids, jnp.int32)


def _positions(positions, length: int) -> jax.Array:
  return jnp.arange(length, dtype=jnp.int32)[None] if positions is None else jnp.atleast_2d(positions)


def _pad_tokens(x_BxL: jax.Array, pad: int) -> jax.Array:
  return jnp.pad(x_BxL, ((0, 0), (0, pad)))


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


def _grouped(x_BxHxQxC, kv_heads: int) -> jax.Array:
  """`[B, H or 1, q, c]` -> `[B, K, G, q, c]` (or `[B, 1, 1, q, c]`), the grouped-heads layout."""
  if x_BxHxQxC.shape[1] == 1:
    return x_BxHxQxC[:, :, None]
  return x_BxHxQxC.reshape(x_BxHxQxC.shape[0], kv_heads, -1, *x_BxHxQxC.shape[2:])


def _sum_to(ds_BxHxQxC, shape: tuple, cq: int, ck: int) -> jax.Array:
  """Sums a `[B, H, cq, ck]` logits gradient over the dims where the bias of `shape` is broadcast."""
  target = _block_shape(shape, cq, ck)
  axes = tuple(a for a in range(4) if target[a] == 1 and ds_BxHxQxC.shape[a] != 1)
  return ds_BxHxQxC.sum(axes, keepdims=True)
