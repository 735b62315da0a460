"""`flash_pallas`: a Pallas flash-attention forward kernel; backward: the pure-JAX blockwise backward."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from jformer.attention import blockwise
from jformer.attention.registry import register
from jformer.ops import masks

# Triton (GPU) needs tiles of at least 16 rows; the interpreter takes any size.
_MIN_COMPILED_BLOCK = 16


@register("flash_pallas", supports={"causal", "segment_ids", "positions", "decode", "gqa"},
          example_options=dict(block_q=4, block_k=4))
def flash_pallas(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
                 kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, block_q=128,
                 block_k=128, interpret=None):
  """Flash attention (Dao et al. 2022) as a Pallas kernel, compiled on GPU, interpreted elsewhere; no mask/bias.

  Forward: one kernel instance per (batch, query head, block of `block_q` queries) keeps its queries, the
  running max, normaliser and output accumulator on chip and loops over blocks of `block_k` keys (the online
  softmax of `blockwise`), writing the output and the logsumexp. Key/value head h // (H / K) is read in place
  for grouped-query attention. Visibility comes from segment ids and, when causal, positions.
  Backward: `blockwise`'s custom VJP in pure JAX (recomputes each block from the logsumexp; memory linear in
  length), so gradients match `chunked` and the reference.

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0), the masking arguments of the
    variant signature (`jformer/attention/__init__.py`).
    block_q, block_k: tile sizes (options); powers of two >= 16 when compiled for GPU.
    interpret: run the kernel in the Pallas interpreter; None = unless the backend is GPU (Triton), e.g. on CPU.
      The block shapes here are Triton's; on TPU the interpreter runs (use `chunked` there for speed).

  Returns:
    `[B, T, H, Dv]`.
  """
  del mask, bias, dropout_rate, dropout_rng  # not declared: the registry refuses them before calling.
  if interpret is None:
    interpret = jax.default_backend() != "gpu"
  if interpret:
    tile = min
  else:  # a tile no longer than needed, but a power of two >= 16
    tile = lambda size, length: min(size, max(_MIN_COMPILED_BLOCK, pl.next_power_of_2(length)))
  return blockwise.attention(query, key, value, causal=causal, q_segment_ids=q_segment_ids,
                             kv_segment_ids=kv_segment_ids, q_positions=q_positions, kv_positions=kv_positions,
                             mask=None, bias=None, query_chunk_size=tile(block_q, query.shape[1]),
                             key_chunk_size=tile(block_k, key.shape[1]), forward=_FORWARD[bool(interpret)])


def _pallas_forward(blocks: blockwise.Blocks, score, q, k, v, params, visibility: blockwise.Visibility, mask, bias,
                    *, interpret: bool):
  """`blockwise.Forward` as a Pallas call: grid (batch, query head, query block); q arrives scaled by 1/sqrt(d)."""
  del score, params, mask, bias  # always None here: `flash_pallas` passes none of them.
  batch, kv_heads, groups, q_len, head_dim = q.shape
  kv_len, value_dim = k.shape[2], v.shape[-1]
  heads, cq = kv_heads * groups, blocks.query_chunk
  q_BxHxTxD = q.reshape(batch, heads, q_len, head_dim)
  tokens = [jnp.broadcast_to(x, (batch, x.shape[1])) for x in visibility]
  kernel = functools.partial(_kernel, causal=blocks.causal, key_chunk=blocks.key_chunk)
  query_block = lambda b, h, i: (b, h, i, 0)
  kv_block = lambda b, h, i: (b, h // groups, 0, 0)
  out, lse = pl.pallas_call(
      kernel,
      grid=(batch, heads, q_len // cq),
      in_specs=[pl.BlockSpec((None, None, cq, head_dim), query_block),
                pl.BlockSpec((None, None, kv_len, head_dim), kv_block),
                pl.BlockSpec((None, None, kv_len, value_dim), kv_block),
                pl.BlockSpec((None, cq), lambda b, h, i: (b, i)),
                pl.BlockSpec((None, kv_len), lambda b, h, i: (b, 0)),
                pl.BlockSpec((None, cq), lambda b, h, i: (b, i)),
                pl.BlockSpec((None, kv_len), lambda b, h, i: (b, 0))],
      out_specs=[pl.BlockSpec((None, None, cq, value_dim), query_block),
                 pl.BlockSpec((None, None, cq), lambda b, h, i: (b, h, i))],
      out_shape=[jax.ShapeDtypeStruct((batch, heads, q_len, value_dim), q.dtype),
                 jax.ShapeDtypeStruct((batch, heads, q_len), jnp.float32)],
      interpret=interpret,
      name="flash_attention_forward",
  )(q_BxHxTxD, k, v, *tokens)
  return (out.reshape(batch, kv_heads, groups, q_len, value_dim), lse.reshape(batch, kv_heads, groups, q_len))


def _kernel(q_ref, k_ref, v_ref, q_segment_ref, kv_segment_ref, q_position_ref, kv_position_ref, out_ref, lse_ref,
            *, causal: bool, key_chunk: int):
  """One (batch, head, query block): the online softmax over all key blocks (`blockwise` equations)."""
  q = q_ref[...]
  q_segments, q_positions = q_segment_ref[...], q_position_ref[...]

  def body(j, carry):
    m, l, acc = carry
    keys = pl.ds(j * key_chunk, key_chunk)
    visible = masks.visible_keys(q_segments, kv_segment_ref[keys],
                                 *((q_positions, kv_position_ref[keys]) if causal else (None, None)))
    s = jnp.where(visible, jnp.dot(q, k_ref[keys, :].T, preferred_element_type=jnp.float32), blockwise.MASK_VALUE)
    m_new = jnp.maximum(m, s.max(-1))
    correction = jnp.exp(m - m_new)
    p = jnp.exp(s - m_new[:, None])
    pv = jnp.dot(p.astype(v_ref.dtype), v_ref[keys, :], preferred_element_type=jnp.float32)
    return m_new, correction * l + p.sum(-1), correction[:, None] * acc + pv

  block_q = q.shape[0]
  init = (jnp.full((block_q,), blockwise.MASK_VALUE, jnp.float32), jnp.zeros((block_q,), jnp.float32),
          jnp.zeros((block_q, out_ref.shape[-1]), jnp.float32))
  m, l, acc = lax.fori_loop(0, k_ref.shape[0] // key_chunk, body, init)
  out_ref[...] = (acc / l[:, None]).astype(out_ref.dtype)  # l >= 1: every block is visited.
  lse_ref[...] = m + jnp.log(l)


_FORWARD = {interpret: functools.partial(_pallas_forward, interpret=interpret) for interpret in (False, True)}
