"""`gated_deltanet`: Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024, "Gated Delta Networks: Improving Mamba2 with
Delta Rule"): linear attention whose state is decayed by a gate and corrected by the delta rule,

    S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T,    o_t = S_t q_t,

with q_t, k_t L2-normalised per head, a decay alpha_t = exp(-A softplus(x_t W_a + dt_bias)) in (0, 1) (Mamba2's, A =
exp(a_log) > 0) and a write strength beta_t = sigmoid(x_t W_b), both per head and token from the layer input x_t
(captures). The state is kept transposed, M_t = S_t^T `[Dk, Dv]`: M_t = alpha_t (I - beta_t k_t k_t^T) M_{t-1} +
beta_t k_t v_t^T, o_t = M_t^T q_t. docs/attention.md derives the chunked form.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jformer.attention.capture import Capture
from jformer.attention.decode_state import recurrent
from jformer.attention.registry import register
from jformer.ops import masks
from jformer.registry import Param

DT_MIN, DT_MAX = 1e-3, 1e-1  # the range of softplus(dt_bias) at initialisation (Mamba2's)


def _decay_rate_init(key, shape, dtype=jnp.float32):
  """a_log = log A, A ~ U(1, 16) per head (Mamba2's U(0, 16), kept off 0)."""
  return jnp.log(jax.random.uniform(key, shape, dtype, 1.0, 16.0))


def _dt_bias_init(key, shape, dtype=jnp.float32):
  """dt_bias = softplus^-1(dt), dt log-uniform in [DT_MIN, DT_MAX] per head (Mamba2's)."""
  dt = jnp.exp(jax.random.uniform(key, shape, dtype, jnp.log(DT_MIN), jnp.log(DT_MAX)))
  return dt + jnp.log(-jnp.expm1(-dt))


PARAMS = {"alpha_weight": Param(("d_model", "heads"), jax.nn.initializers.lecun_normal()),
          "beta_weight": Param(("d_model", "heads"), jax.nn.initializers.lecun_normal()),
          "a_log": Param(("heads",), _decay_rate_init), "dt_bias": Param(("heads",), _dt_bias_init)}
# The gates' logits x_t W_a and x_t W_b, `[B, L, H]`: the variant maps them to alpha_t and beta_t (`gates`).
CAPTURES = {"alpha_logit": Capture(lambda x, params: x.astype(jnp.float32) @ params["alpha_weight"]),
            "beta_logit": Capture(lambda x, params: x.astype(jnp.float32) @ params["beta_weight"])}


def gates(params: dict, captured: dict, heads: int) -> tuple[jax.Array, jax.Array]:
  """(log alpha_t = -exp(a_log) softplus(x_t W_a + dt_bias) < 0, beta_t = sigmoid(x_t W_b)), each `[B, L, H]`
  float32, from one side's captured logits (`[B, L, H]`, or `[B, L]` shared by the heads)."""
  per_head = lambda x: jnp.broadcast_to(x if x.ndim == 3 else x[..., None], x.shape[:2] + (heads,))
  log_alpha = -jnp.exp(params["a_log"]) * jax.nn.softplus(per_head(captured["alpha_logit"]) + params["dt_bias"])
  return log_alpha, jax.nn.sigmoid(per_head(captured["beta_logit"]))


def _inputs(query, key, value, params, captures):
  """Float32 L2-normalised queries and keys, values, and the keys' (log alpha, beta) `[B, S, H]`."""
  unit = lambda x: x * lax.rsqrt(jnp.sum(jnp.square(x), -1, keepdims=True) + 1e-6)
  f32 = lambda x: x.astype(jnp.float32)
  return (unit(f32(query)), unit(f32(key)), f32(value), *gates(params, captures["kv"], query.shape[2]))


def _recurrence(state_BxHxKxV, q_BxTxHxK, k_BxTxHxK, v_BxTxHxV, log_alpha_BxTxH, beta_BxTxH):
  """The recurrence token by token (a `lax.scan`): M_t = alpha_t M_{t-1} + beta_t k_t (v_t - alpha_t M_{t-1}^T
  k_t)^T (= alpha_t (I - beta_t k_t k_t^T) M_{t-1} + beta_t k_t v_t^T), o_t = M_t^T q_t. Returns (o `[B, T, H, Dv]`,
  M_T `[B, H, Dk, Dv]`). O(T Dk Dv)."""

  def step(state, x):
    q, k, v, log_alpha, beta = x
    state = jnp.exp(log_alpha)[..., None, None] * state
    error = v - jnp.einsum("bhk,bhkv->bhv", k, state)
    state = state + beta[..., None, None] * k[..., :, None] * error[..., None, :]
    return state, jnp.einsum("bhk,bhkv->bhv", q, state)

  state, out = lax.scan(step, state_BxHxKxV, tuple(jnp.moveaxis(x, 1, 0) for x in (
      q_BxTxHxK, k_BxTxHxK, v_BxTxHxV, log_alpha_BxTxH, beta_BxTxH)))
  return jnp.moveaxis(out, 0, 1), state


def _chunks(q_BxTxHxK, k_BxTxHxK, v_BxTxHxV, log_alpha_BxTxH, beta_BxTxH, segment_ids_BxT, chunk: int):
  """The chunked form (the WY representation, Yang et al. 2024, with the gate folded in), a `lax.scan` over chunks
  of C tokens carrying M and the segment still open. Within a chunk, with g_t the cumulative log gate from the chunk's
  start, Gamma_ts = exp(g_t - g_s) and E_ts = [same segment], c_t = [t continues the open segment]:

      (I + A) U = diag(beta) V - diag(beta exp(g) c) K M_0,   A_ts = beta_t Gamma_ts (k_t . k_s) E_ts  (s < t)
      O = diag(exp(g) c) Q M_0 + (Q K^T * Gamma * E)_{s <= t} U
      M_C = [last segment open] exp(g_C) M_0 + sum_{s in the last segment} Gamma_Cs k_s u_s^T

  (U: the rows u_t = beta_t (v_t - alpha_t M_{t-1}^T k_t) by which M_t = alpha_t M_{t-1} + k_t u_t^T; a unit lower
  triangular solve, the UT transform). Segment id 0 (padding) writes nothing. `q_BxTxHxK` None: U only. Returns
  (U `[B, T, H, Dv]`, O `[B, T, H, Dv]` or None). Time O(T C (Dk + Dv) + T Dk Dv)."""
  batch, length, heads, dim = k_BxTxHxK.shape
  pad = -length % chunk
  # [B, T, ...] -> [T / C, B, C, ...], the padding (segment 0) at the end.
  per_chunk = lambda x: jnp.moveaxis(
      jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)).reshape(batch, -1, chunk, *x.shape[2:]), 1, 0)
  heads_major = lambda x: jnp.moveaxis(x, 2, 1)  # [B, C, H, ...] -> [B, H, C, ...]
  causal = jnp.tril(jnp.ones((chunk, chunk), bool))

  def step(carry, x):
    state_BxHxKxV, open_B = carry
    k, v, log_alpha, beta, segments, *q = x
    g_BxHxC = heads_major(jnp.cumsum(log_alpha, axis=1))
    beta_BxHxC = heads_major(beta * (segments != 0)[..., None])
    seen = causal & (segments[:, :, None] == segments[:, None, :])[:, None]  # [B, 1, C, C]: s <= t, same segment
    decay = jnp.where(seen, jnp.exp(jnp.where(seen, g_BxHxC[..., :, None] - g_BxHxC[..., None, :], 0.0)), 0.0)
    start_BxHxC = jnp.exp(g_BxHxC) * (segments == open_B[:, None])[:, None]  # exp(g_t) c_t
    a = beta_BxHxC[..., None] * decay * jnp.einsum("bthk,bshk->bhts", k, k)
    rhs = beta_BxHxC[..., None] * (heads_major(v) - start_BxHxC[..., None] * jnp.einsum("bchk,bhkv->bhcv", k,
                                                                                        state_BxHxKxV))
    u_BxHxCxV = lax.linalg.triangular_solve(jnp.tril(a, -1), rhs, left_side=True, lower=True, unit_diagonal=True)
    out = None
    if q:
      out = (start_BxHxC[..., None] * jnp.einsum("bchk,bhkv->bhcv", q[0], state_BxHxKxV)
             + jnp.einsum("bhts,bhsv->bhtv", jnp.einsum("bthk,bshk->bhts", q[0], k) * decay, u_BxHxCxV))
    last_B = segments[:, -1]
    written = jnp.where((segments == last_B[:, None])[:, None], jnp.exp(g_BxHxC[..., -1:] - g_BxHxC), 0.0)
    kept = (last_B == open_B)[:, None] * jnp.exp(g_BxHxC[..., -1])  # [B, H]
    state_BxHxKxV = kept[..., None, None] * state_BxHxKxV + jnp.einsum("bhc,bchk,bhcv->bhkv", written, k, u_BxHxCxV)
    return (state_BxHxKxV, last_B), (u_BxHxCxV, out)

  xs = (k_BxTxHxK, v_BxTxHxV, log_alpha_BxTxH, beta_BxTxH, segment_ids_BxT) + (
      () if q_BxTxHxK is None else (q_BxTxHxK,))
  init = (jnp.zeros((batch, heads, dim, v_BxTxHxV.shape[-1])), jnp.zeros((batch,), segment_ids_BxT.dtype))
  _, (u, out) = lax.scan(step, init, tuple(per_chunk(x) for x in xs))
  unchunk = lambda x: None if x is None else jnp.swapaxes(jnp.moveaxis(x, 0, 2).reshape(
      batch, heads, length + pad, -1)[:, :, :length], 1, 2)
  return unchunk(u), unchunk(out)


def _visible(query, key, **masking) -> jax.Array:
  """`[B, T, S]` bool: key j visible to query i (the variant signature's masking)."""
  visible = masks.attention_mask(query.shape[1], key.shape[1], **masking)
  shape = (query.shape[0], query.shape[1], key.shape[1])
  return jnp.ones(shape, bool) if visible is None else jnp.broadcast_to(visible[:, 0], shape)


def _read_out(q_BxTxHxK, k_BxSxHxK, u_BxSxHxV, log_alpha_BxSxH, visible_BxTxS):
  """o_i = M_{l(i)}^T q_i = sum_{j visible} exp(G_{l(i)} - G_j) (q_i . k_j) u_j, l(i) the last key query i sees,
  G the cumulative log gate along the keys: O(T S (Dk + Dv)), for queries that each see the first keys of one
  example (`gated_deltanet` doc)."""
  g_BxSxH = jnp.cumsum(log_alpha_BxSxH, axis=1)
  last_BxT = jnp.max(jnp.where(visible_BxTxS, jnp.arange(visible_BxTxS.shape[2]), 0), axis=2)
  g_last_BxTxH = jnp.take_along_axis(g_BxSxH, last_BxT[..., None], axis=1)
  seen = visible_BxTxS[..., None]
  decay = jnp.where(seen, jnp.exp(jnp.where(seen, g_last_BxTxH[:, :, None] - g_BxSxH[:, None], 0.0)), 0.0)
  weights_BxTxSxH = decay * jnp.einsum("bthk,bshk->btsh", q_BxTxHxK, k_BxSxHxK)
  return jnp.einsum("btsh,bshv->bthv", weights_BxTxSxH, u_BxSxHxV)


def gated_deltanet_reference(query, key, value, *, params, captures, causal=False, q_segment_ids=None,
                             kv_segment_ids=None, q_positions=None, kv_positions=None, mask=None, bias=None,
                             dropout_rate=0.0, dropout_rng=None, chunk_size=None):
  """The definition, token by token: o_i = M^T q_i, M the recurrence (`_recurrence`) from 0 over the keys query i
  sees, in order (a key it does not see: alpha = 1, beta = 0, M unchanged). O(T S Dk Dv): the tests' reference."""
  del mask, bias, dropout_rate, dropout_rng, chunk_size  # not declared / no chunks.
  q, k, v, log_alpha, beta = _inputs(query, key, value, params, captures)
  visible_BxTxS = _visible(query, key, causal=causal, q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids,
                           q_positions=q_positions, kv_positions=kv_positions)
  zero = jnp.zeros(k.shape[:1] + k.shape[2:] + v.shape[-1:])

  def one_query(q_BxHxK, visible_BxS):
    seen = visible_BxS[..., None]
    out, _ = _recurrence(zero, jnp.broadcast_to(q_BxHxK[:, None], k.shape), k, v, log_alpha * seen, beta * seen)
    return out[:, -1]

  return jax.vmap(one_query, in_axes=1, out_axes=1)(q, visible_BxTxS).astype(query.dtype)


def decode_init(batch: int, heads: int, head_dim: int, value_dim: int) -> dict:
  """The decode state before any token: M = 0, `[B, H, Dk, Dv]` float32, whatever the decode length."""
  return {"state": jnp.zeros((batch, heads, head_dim, value_dim), jnp.float32)}


def decode_step(state: dict, query, key, value, *, params, captures, chunk_size=None) -> tuple[jax.Array, dict]:
  """T new tokens after the state's: the recurrence (`_recurrence`) from the kept M, their gates from `captures`
  (the new tokens'); returns (out `[B, T, H, Dv]`, the state after them). O(T Dk Dv) per call."""
  del chunk_size  # one token at a time.
  out, kept = _recurrence(state["state"], *_inputs(query, key, value, params, captures))
  return out.astype(query.dtype), {"state": kept}


@register("gated_deltanet", supports={"causal", "segment_ids", "positions", "decode"}, params=PARAMS,
          captures=CAPTURES, reference=gated_deltanet_reference, example_options=dict(chunk_size=4),
          decode_state=recurrent(decode_init, decode_step))
def gated_deltanet(query, key, value, *, params, captures, causal=False, q_segment_ids=None, kv_segment_ids=None,
                   q_positions=None, kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None,
                   chunk_size=64):
  """Gated DeltaNet (Yang et al. 2024): o_t = S_t q_t, S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T.

  Query i reads the state M left by the keys it sees, in slot order, from M = 0 (`gated_deltanet_reference`):
  - Causal self-attention (T == S): the chunked form (`_chunks`, chunks of `chunk_size` tokens), masked by index and
    segment ids: the state restarts at each example of a packed row. Time O(T C (Dk + Dv) + T Dk Dv), memory
    O(T C + T/C Dk Dv); examples must be contiguous runs with positions increasing along the row (as packing
    produces).
  - Otherwise (not causal: every query reads its example's final state; decode steps against a cache, T != S): the
    rows u_j of the chunked form read out as o_i = sum_j exp(G_l(i) - G_j) (q_i . k_j) u_j over the visible keys j,
    l(i) the last of them (`_read_out`): O(T S (Dk + Dv)), like softmax attention. Each query must see the first
    keys of one example (a prefix of its run, in slot order), as causal and segment masking give.
  The model decodes with the recurrent state instead (`decode_step`): O(Dk Dv) per token.

  Args:
    query `[B, T, H, Dk]`, key `[B, S, H, Dk]`, value `[B, S, H, Dv]` (fewer key/value heads are repeated by the
    registry), params {"alpha_weight", "beta_weight": [d_model, H], "a_log", "dt_bias": [H]}, captures {"q", "kv":
    {"alpha_logit", "beta_logit": [B, L, H]}} (the keys' set the gates), the masking arguments of the variant
    signature (`jformer/attention/__init__.py`); chunk_size: option, a positive int.

  Returns:
    `[B, T, H, Dv]` in the query dtype.
  """
  del mask, bias, dropout_rate, dropout_rng  # not declared: the registry refuses them before calling.
  q, k, v, log_alpha, beta = _inputs(query, key, value, params, captures)
  segments = lambda ids, x: jnp.ones(x.shape[:2], jnp.int32) if ids is None else jnp.broadcast_to(ids, x.shape[:2])
  kv_segments = segments(kv_segment_ids, key)
  chunk = min(chunk_size, key.shape[1])
  if causal and query.shape[1] == key.shape[1]:
    _, out = _chunks(q, k, v, log_alpha, beta, kv_segments, chunk)
    out = out * (segments(q_segment_ids, query) != 0)[..., None, None]
  else:
    u, _ = _chunks(None, k, v, log_alpha, beta, kv_segments, chunk)
    out = _read_out(q, k, u, log_alpha, _visible(query, key, causal=causal, q_segment_ids=q_segment_ids,
                                                 kv_segment_ids=kv_segment_ids, q_positions=q_positions,
                                                 kv_positions=kv_positions))
  return out.astype(query.dtype)
