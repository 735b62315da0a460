"""`sink`: softmax attention with a learned sink logit per head in the denominator (gpt-oss; the attention sink of
Xiao et al. 2023), on the blockwise engine: memory linear in the length, blocks outside a window skipped."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jformer.attention import blockwise, local
from jformer.attention.registry import MASKING, register
from jformer.ops.attention import dot_product_logits
from jformer.ops.masks import attention_mask
from jformer.registry import Param, constant

# sink_h per head, starting at 0: the weight of a key whose logit is 0 (gpt-oss learns it with the model).
PARAMS = {"sink": Param(("heads",), constant(0.0))}


def _window(window, window_size):
  """The call's `window=(left, right)` narrowed to the option's (w - 1, w - 1), `local`'s window of size w; None
  for neither. Raises ValueError unless `window_size` is None or a positive int."""
  if window_size is None:
    return window
  if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size < 1:
    raise ValueError(f"attention variant 'sink' needs a positive int window_size, or None for no window, got "
                     f"{window_size!r} (--config.model.attention_options.window_size)")
  own = local.window_of(window_size)
  return own if window is None else (min(window[0], own[0]), min(window[1], own[1]))


def sink_weights(query, key, *, params, logits_softcap=0.0, window=None, window_size=None, query_chunk_size=None,
                 key_chunk_size=None, **masking) -> jax.Array:
  """e^(s_ij) / (e^(sink_h) + sum_j' e^(s_ij')) at the visible keys, 0 at the others, s = cap(Q K^T / sqrt(d_k)) +
  bias: `[B, H, T, S]` float32, each row summing to 1 - its sink's share. The explicit formula: softmax over the
  visible keys and one more logit, the sink's, whose column is dropped."""
  del query_chunk_size, key_chunk_size  # the engine's blocks.
  masking = {k: masking.get(k, v) for k, v in MASKING.items() if k != "window"}
  visible = attention_mask(query.shape[1], key.shape[1], **{k: v for k, v in masking.items() if k != "bias"},
                           window=_window(window, window_size))
  logits_BxHxTxS = dot_product_logits(query, key, bias=masking["bias"], softcap=logits_softcap)
  if visible is not None:
    logits_BxHxTxS = jnp.where(visible, logits_BxHxTxS, jnp.finfo(jnp.float32).min)
  sink_BxHxTx1 = jnp.broadcast_to(params["sink"].astype(jnp.float32)[None, :, None, None],
                                  logits_BxHxTxS.shape[:3] + (1,))
  return jax.nn.softmax(jnp.concatenate([logits_BxHxTxS, sink_BxHxTx1], axis=-1), axis=-1)[..., :-1]


@register("sink", supports={"causal", "segment_ids", "positions", "mask", "bias", "decode", "gqa", "softcap", "window"},
          params=PARAMS, weights=sink_weights, example_options=dict(query_chunk_size=4, key_chunk_size=3))
def sink(query, key, value, *, params, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
         kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, logits_softcap=0.0, window=None,
         window_size=None, query_chunk_size=256, key_chunk_size=512):
  """Attention sinks (gpt-oss; Xiao et al. 2023): out_i = sum_j e^(s_ij) v_j / (e^(sink_h) + sum_j e^(s_ij)).

  Softmax attention, s = cap(Q K^T / sqrt(d_k)) + bias over the visible keys, with one more logit per head in the
  denominator, sink_h (the `sink` parameter, learned): a key every query sees whose value is 0, so a head can give
  part or all of its attention to nothing instead of to the first tokens (the sink Xiao et al. found softmax
  attention makes of them). With the log-sum-exp of the visible keys, lse_i, that is softmax attention's output
  times sigmoid(lse_i - sink_h), and its gradients are the engine's backward at the merged output and log-sum-exp
  (the merge of `blockwise.forward_blocks`' doc, the sink a key range of its own), plus d sink_h = -sum_i
  e^(sink_h - lse'_i) (dout_i . out_i), lse' = log(e^lse_i + e^sink_h). A query that sees no key gets 0.

  gpt-oss puts sinks in its sliding-window layers and its full ones: `window_size` (option) gives this layer
  `local`'s window, keys less than w positions away (causal: before), and the engine skips the blocks outside it;
  the signature's `window=` works too (both: the narrower). Decoding keeps every key and value of the decode length
  (the window's layers too: the mask hides the older ones).

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0), the arguments of the variant
    signature (`jformer/attention/__init__.py`); params {"sink": [H]}.
    window_size: option, a positive int, or None (default) for no window of its own.
    query_chunk_size, key_chunk_size: the engine's blocks (options, positive ints), as `chunked`'s.

  Returns:
    `[B, T, H, Dv]`.
  """
  del dropout_rate, dropout_rng  # not declared: the registry refuses dropout before calling.
  window = _window(window, window_size)
  blocks = blockwise.Blocks(min(query_chunk_size, query.shape[1]), min(key_chunk_size, key.shape[1]), causal,
                            float(logits_softcap), None if window is None else (int(window[0]), int(window[1])))
  visibility = blockwise.Visibility(q_segment_ids, kv_segment_ids, q_positions, kv_positions)
  return _attend(blocks, query, key, value, params["sink"], bias, visibility, mask)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attend(blocks: blockwise.Blocks, query, key, value, sink_H, bias, visibility: blockwise.Visibility, mask):
  """Attention with a sink, `[B, T, H, Dv]` (`sink`'s doc)."""
  return _forward(blocks, query, key, value, sink_H, bias, visibility, mask)[0]


def _forward(blocks, query, key, value, sink_H, bias, visibility, mask):
  """(out, (the engine's residuals at the merged output and log-sum-exp, sink_H)): softmax attention over the
  visible keys, merged with the sink's range, whose log-sum-exp is sink_h and whose output is 0."""
  out, residuals = blockwise.forward_blocks(query=query, key=key, value=value, blocks=blocks, visibility=visibility,
                                            mask=mask, bias=bias)
  lse_BxTxH = jnp.logaddexp(residuals.lse, sink_H.astype(jnp.float32))
  out = (jnp.exp(residuals.lse - lse_BxTxH)[..., None] * out.astype(jnp.float32)).astype(query.dtype)
  return out, (residuals._replace(out=out, lse=lse_BxTxH), sink_H)


def _backward(blocks, saved, d_out):
  """dq, dk, dv (and dbias) from the engine's backward at the merged output and log-sum-exp; d sink_h =
  -sum_{b, i} p_sink (dout_i . out_i), p_sink = e^(sink_h - lse'_i) the sink's weight."""
  residuals, sink_H = saved
  grads = blockwise.backward_blocks(residuals=residuals, d_out=d_out, blocks=blocks)
  delta_BxTxH = jnp.einsum("bthd,bthd->bth", d_out.astype(jnp.float32), residuals.out.astype(jnp.float32))
  d_sink_H = -jnp.einsum("bth,bth->h", jnp.exp(sink_H.astype(jnp.float32) - residuals.lse), delta_BxTxH)
  return grads.query, grads.key, grads.value, d_sink_H.astype(sink_H.dtype), grads.bias, None, None


_attend.defvjp(_forward, _backward)
