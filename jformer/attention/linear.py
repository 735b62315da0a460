"""`linear`: kernelized linear attention (Katharopoulos et al. 2020), phi(x) = elu(x) + 1."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jformer.attention.decode_state import recurrent
from jformer.attention.registry import register
from jformer.ops import masks


def _phi(x):
  """The feature map phi(x) = elu(x) + 1 > 0 (eq. 7), in float32."""
  return jax.nn.elu(x.astype(jnp.float32)) + 1.0


def linear_weights(query, key, *, chunk_size=None, bias=None, **masking):
  """The weights linear attention applies to the values, `[B, H, T, S]`: phi(q_i).phi(k_j) over the visible j,
  normalised to sum to 1 (eq. 6; 0 for a query that sees no key). The explicit quadratic formula."""
  del chunk_size, bias  # not declared: linear attention takes no bias
  return feature_weights(_phi(query), _phi(key), **masking)


def feature_weights(phi_q, phi_k, **masking):
  """`linear_weights` of given features phi_q `[B, T, H, F]`, phi_k `[B, S, H, F]`."""
  visible = masks.attention_mask(phi_q.shape[1], phi_k.shape[1], **masking)
  kernel_BxHxTxS = jnp.einsum("bthd,bshd->bhts", phi_q, phi_k) * (True if visible is None else visible)
  normaliser = kernel_BxHxTxS.sum(-1, keepdims=True)
  return kernel_BxHxTxS / jnp.where(normaliser > 0, normaliser, 1.0)


def decode_init(batch: int, heads: int, head_dim: int, value_dim: int) -> dict:
  """The decode state before any token: the sums over j of phi(k_j) v_j^T `[B, H, D, Dv]` and phi(k_j) `[B, H, D]`."""
  return {"kv": jnp.zeros((batch, heads, head_dim, value_dim), jnp.float32),
          "k": jnp.zeros((batch, heads, head_dim), jnp.float32)}


def decode_step(state: dict, query, key, value, *, chunk_size=None) -> tuple[jax.Array, dict]:
  """T new tokens after the state's (eq. 8-9): out_i = phi(q_i) (S + sum_{j<=i} phi(k_j) v_j^T) / phi(q_i) (z +
  sum_{j<=i} phi(k_j)) over the new j (causal among them), S and z the state's sums; returns (out `[B, T, H, Dv]`,
  the state with the new tokens added). O(T^2 + T D Dv) per call, whatever came before."""
  del chunk_size  # the state replaces the chunks.
  phi_q, phi_k, value_f32 = _phi(query), _phi(key), value.astype(jnp.float32)
  causal = jnp.tril(jnp.ones((query.shape[1], key.shape[1]), bool))[None]
  num, den = _masked(phi_q, phi_k, value_f32, causal)
  num = num + jnp.einsum("bthd,bhde->bthe", phi_q, state["kv"])
  den = den + jnp.einsum("bthd,bhd->bth", phi_q, state["k"])
  out = (num / jnp.where(den > 0, den, 1.0)[..., None]).astype(query.dtype)
  return out, {"kv": state["kv"] + jnp.einsum("bshd,bshe->bhde", phi_k, value_f32),
               "k": state["k"] + phi_k.sum(1)}


@register("linear", supports={"causal", "segment_ids", "positions", "decode"}, weights=linear_weights,
          example_options=dict(chunk_size=4), decode_state=recurrent(decode_init, decode_step))
def linear(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
           kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, chunk_size=128):
  """Linear attention: out_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j) over visible j; not softmax.

  phi(x) = elu(x) + 1 > 0 (Katharopoulos et al. 2020, eq. 5-7); visibility as in the variant signature. A query
  that sees no key gets 0.
  - Causal self-attention (T == S): chunks of `chunk_size` tokens; inside a chunk the masked quadratic form,
    across chunks a running state sum_j phi(k_j) v_j^T, sum_j phi(k_j) of the segment still open (eq. 8-9,
    the prefix sums, with a `lax.scan` over chunks): time O(T * (chunk + D Dv)), memory O(T * chunk + T/chunk D Dv).
    The state carries over a chunk boundary only within a segment, so segments must be contiguous runs with
    positions increasing along the row (as packing produces).
  - Non-causal without segment ids: the global sums sum_j phi(k_j) v_j^T, sum_j phi(k_j): O(T + S).
  - Otherwise (non-causal with segment ids, decode steps, causal T != S): the masked quadratic form over the
    full `[T, S]` mask, O(T * S) (O(S) for a decode step, T = 1). Padded keys drop out through the mask.

  Args:
    query `[B, T, H, D]`, key `[B, S, H, D]`, value `[B, S, H, Dv]` (fewer key/value heads are repeated by the
    registry), the masking arguments of the variant signature (`jformer/attention/__init__.py`).
    chunk_size: option, a positive int.

  Returns:
    `[B, T, H, Dv]` in the query dtype.
  """
  del mask, bias, dropout_rate, dropout_rng  # not declared: the registry refuses them before calling.
  return attend_features(_phi(query), _phi(key), value, causal=causal, q_segment_ids=q_segment_ids,
                         kv_segment_ids=kv_segment_ids, q_positions=q_positions, kv_positions=kv_positions,
                         chunk_size=chunk_size).astype(query.dtype)


def attend_features(phi_q, phi_k, value, *, causal, q_segment_ids, kv_segment_ids, q_positions, kv_positions,
                    chunk_size: int) -> jax.Array:
  """sum_j phi_q_i . phi_k_j v_j / sum_j phi_q_i . phi_k_j over the visible j, float32 `[B, T, H, Dv]`, from positive
  features phi_q `[B, T, H, F]`, phi_k `[B, S, H, F]` (any feature map: `linear`'s elu + 1, `hedgehog`'s learned
  one), computed as `linear`'s doc says."""
  q_len, kv_len = phi_q.shape[1], phi_k.shape[1]
  value = value.astype(jnp.float32)
  if causal and q_len == kv_len:
    num, den = _causal_chunks(phi_q, phi_k, value, min(chunk_size, q_len), q_segment_ids, kv_segment_ids,
                              q_positions, kv_positions)
  elif not causal and q_segment_ids is None and kv_segment_ids is None:
    num = jnp.einsum("bthd,bhde->bthe", phi_q, jnp.einsum("bshd,bshe->bhde", phi_k, value))
    den = jnp.einsum("bthd,bhd->bth", phi_q, phi_k.sum(1))
  else:
    visible = masks.attention_mask(q_len, kv_len, causal=causal, q_segment_ids=q_segment_ids,
                                   kv_segment_ids=kv_segment_ids, q_positions=q_positions, kv_positions=kv_positions)
    num, den = _masked(phi_q, phi_k, value, visible[:, 0])
  return num / jnp.where(den > 0, den, 1.0)[..., None]


def _masked(phi_q, phi_k, value, visible_BxTxS):
  """Numerator `[B, T, H, Dv]` and denominator `[B, T, H]` of the quadratic form (phi(Q) phi(K)^T * M) V."""
  weights_BxHxTxS = jnp.einsum("bthd,bshd->bhts", phi_q, phi_k) * visible_BxTxS[:, None]
  return jnp.einsum("bhts,bshe->bthe", weights_BxHxTxS, value), jnp.einsum("bhts->bth", weights_BxHxTxS)


def _causal_chunks(phi_q, phi_k, value, chunk: int, q_segment_ids, kv_segment_ids, q_positions, kv_positions):
  """Causal numerator and denominator by chunks, with the state of the open segment carried across chunks."""
  batch, length, heads, dim = phi_q.shape
  pad = -length % chunk
  tokens = lambda x: jnp.broadcast_to(jnp.ones(length, jnp.int32) if x is None else x, (batch, length))
  positions = lambda x: jnp.broadcast_to(jnp.arange(length) if x is None else x, (batch, length))
  # Padding gets segment id 0: it sees nothing and is seen by nothing.
  per_chunk = lambda x: jnp.moveaxis(
      jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)).reshape(batch, -1, chunk, *x.shape[2:]), 1, 0)
  xs = tuple(per_chunk(x) for x in (phi_q, phi_k, value, tokens(q_segment_ids), tokens(kv_segment_ids),
                                    positions(q_positions), positions(kv_positions)))

  def step(carry, x):
    state_BxHxDxE, norm_BxHxD, open_segment_B = carry
    phi_q, phi_k, value, q_segments, kv_segments, q_pos, kv_pos = x
    phi_k = phi_k * (kv_segments != 0)[..., None, None]
    num, den = _masked(phi_q, phi_k, value, masks.visible_keys(q_segments, kv_segments, q_pos, kv_pos))
    continues = (q_segments == open_segment_B[:, None])[..., None]  # queries of the segment open before the chunk
    num = num + jnp.einsum("bchd,bhde->bche", phi_q, state_BxHxDxE) * continues[..., None]
    den = den + jnp.einsum("bchd,bhd->bch", phi_q, norm_BxHxD) * continues
    last_B = kv_segments[:, -1]  # the only segment that can continue into the next chunk
    keep_B = (last_B == open_segment_B).astype(phi_k.dtype)
    phi_k_last = phi_k * (kv_segments == last_B[:, None])[..., None, None]
    state_BxHxDxE = state_BxHxDxE * keep_B[:, None, None, None] + jnp.einsum("bchd,bche->bhde", phi_k_last, value)
    norm_BxHxD = norm_BxHxD * keep_B[:, None, None] + phi_k_last.sum(1)
    return (state_BxHxDxE, norm_BxHxD, last_B), (num, den)

  init = (jnp.zeros((batch, heads, dim, value.shape[-1])), jnp.zeros((batch, heads, dim)),
          jnp.zeros((batch,), jnp.int32))
  _, (num, den) = lax.scan(step, init, xs)
  unchunk = lambda x: jnp.moveaxis(x, 0, 1).reshape(batch, length + pad, *x.shape[3:])[:, :length]
  return unchunk(num), unchunk(den)
