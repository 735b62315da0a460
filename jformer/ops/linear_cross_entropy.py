"""The output projection and the label-smoothed cross-entropy as one function, never holding all the logits.

`linear_cross_entropy(h, E, targets, weights)` equals `weighted_cross_entropy(h E^T, targets, weights)` (and the
accuracy of `h E^T`), computed `chunk_tokens` target tokens at a time: the `[B, T, V]` logits are never stored
whole, so memory does not grow with B * T * V, and the chunk that is being worked on stays in cache.

Its gradient is computed in the forward pass (the loss is a sum, so its gradient is the cotangent times a
fixed array): for each chunk, with p = softmax(z), z = h E^T, and the smoothed target q (1 - eps on the target
token, l = eps / (V - 1) elsewhere),
    dL/dz = w * (p - q) = w * (p - l - (1 - eps - l) onehot(target)),
    dL/dh = dL/dz E,     dL/dE += (dL/dz)^T h,
so no logits are kept for the backward and none are recomputed: three matmuls in all, as for the plain loss.
The per-token loss uses sum_v q_v = 1:
    -sum_v q_v log p_v = logsumexp(z) - (1 - eps - l) z_target - l sum_v z_v,
minus the entropy of q (so a perfect model scores 0, as `losses.smoothed_cross_entropy`).

Two options change the logits and the loss, both 0 (off) by default:
- a soft-cap c > 0 (Gemma 2): the logits are z = c tanh(u / c) of u = h E^T, and dL/du = dL/dz (1 - (z / c)^2);
- a z-loss weight a > 0 (PaLM; t5x `cross_entropy_with_logits`): each token adds a (log Z)^2, log Z = logsumexp(z),
  whose gradient is 2 a log Z p: dL/dz = w ((1 + 2 a log Z) p - q). Its sum is also returned apart (`Sums.z_loss`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jformer.ops.losses import smoothed_target, smoothed_target_entropy
from jformer.ops.softcap import soft_cap

# Target tokens per chunk: a [chunk, V] float32 block is 16 MiB at V = 8192, 64 MiB at V = 32768, small enough
# to stay in cache-friendly pieces, large enough that each piece is one efficient matmul.
DEFAULT_CHUNK_TOKENS = 512


class Sums(NamedTuple):
  """What `linear_cross_entropy_sums` returns: float32 scalars summed over the (weighted) target tokens.

  Attributes:
    loss: sum of w * (smoothed cross-entropy + z-loss term): the objective (differentiable).
    weight: sum of w (the target tokens).
    correct: sum of w over the tokens whose target logit is the largest (ties count as correct).
    z_loss: sum of w * z_loss_weight * (log Z)^2, the z-loss part of `loss` (0 when the weight is 0).
  """
  loss: jax.Array
  weight: jax.Array
  correct: jax.Array
  z_loss: jax.Array


def linear_cross_entropy(hidden_BxTxD: jax.Array, embedding_VxD: jax.Array, targets_BxT: jax.Array,
                         weights_BxT: jax.Array | None = None, label_smoothing: float = 0.0, *,
                         chunk_tokens: int = DEFAULT_CHUNK_TOKENS, logits_softcap: float = 0.0,
                         z_loss: float = 0.0, per_row: bool = False) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`(loss, weight, correct)` of `linear_cross_entropy_sums` (its doc)."""
  return linear_cross_entropy_sums(hidden_BxTxD, embedding_VxD, targets_BxT, weights_BxT, label_smoothing,
                                   chunk_tokens=chunk_tokens, logits_softcap=logits_softcap, z_loss=z_loss,
                                   per_row=per_row)[:3]


def linear_cross_entropy_sums(hidden_BxTxD: jax.Array, embedding_VxD: jax.Array, targets_BxT: jax.Array,
                              weights_BxT: jax.Array | None = None, label_smoothing: float = 0.0, *,
                              chunk_tokens: int = DEFAULT_CHUNK_TOKENS, logits_softcap: float = 0.0,
                              z_loss: float = 0.0, per_row: bool = False) -> Sums:
  """Weighted label-smoothed cross-entropy of the logits `hidden E^T` (paper Sec. 3.4, 5.4), chunk by chunk.

  Args:
    hidden_BxTxD: final decoder states `[B, T, D]` (any float dtype: the matmuls run in it, in float32 out).
    embedding_VxD: output embedding `[V, D]` (tied: the shared token embedding); gets its gradient in its
      own dtype.
    targets_BxT: int token ids `[B, T]`.
    weights_BxT: per-token weights, default `targets != 0` (padding carries no loss).
    label_smoothing: eps in [0, 1).
    chunk_tokens: about this many tokens (whole rows of the batch times a slice of T) per chunk; chunks run
      over T, so a batch sharded over devices stays sharded.
    logits_softcap: > 0: the logits are cap * tanh(hidden E^T / cap) (the model's `final_logit_softcap`); 0: off.
    z_loss: weight a of the z-loss a * logsumexp(logits)^2 added to each token's loss; 0: off.
    per_row: `correct` per row, `[B]` (an example is exactly right when its row's correct sum equals its weight
      sum), instead of their total.

  Returns:
    `Sums(loss, weight, correct, z_loss)`, differentiable in `hidden` and `embedding` (the loss sum only).
  """
  batch, length, _ = hidden_BxTxD.shape
  if targets_BxT.shape != (batch, length) or embedding_VxD.shape[1] != hidden_BxTxD.shape[2]:
    raise ValueError(f"hidden {hidden_BxTxD.shape}, embedding {embedding_VxD.shape} and targets "
                     f"{targets_BxT.shape} disagree: expected [B, T, D], [V, D] and [B, T]")
  if weights_BxT is None:
    weights_BxT = (targets_BxT != 0).astype(jnp.float32)
  chunk_length = max(1, min(length, chunk_tokens // batch))
  options = Options(float(label_smoothing), float(logits_softcap), float(z_loss))
  loss_sum, correct_B, z_loss_sum = _fused(options, chunk_length, hidden_BxTxD, embedding_VxD, targets_BxT,
                                           weights_BxT.astype(jnp.float32))
  return Sums(loss_sum, jnp.sum(weights_BxT.astype(jnp.float32)), correct_B if per_row else jnp.sum(correct_B),
              z_loss_sum)


class Options(NamedTuple):
  """The static options of one call (hashable: a non-differentiable argument of the custom VJP)."""
  label_smoothing: float
  softcap: float
  z_loss: float


def _chunks(x_BxTx_: jax.Array, chunk_length: int) -> jax.Array:
  """`[B, T, ...]` -> `[T / c, B, c, ...]`, T padded with zeros to whole chunks (zero weight: no loss)."""
  batch, length = x_BxTx_.shape[:2]
  pad = -length % chunk_length
  x_BxTx_ = jnp.pad(x_BxTx_, [(0, 0), (0, pad)] + [(0, 0)] * (x_BxTx_.ndim - 2))
  x = x_BxTx_.reshape(batch, (length + pad) // chunk_length, chunk_length, *x_BxTx_.shape[2:])
  return jnp.moveaxis(x, 1, 0)


def _unchunk(x_NxBxCx_: jax.Array, length: int) -> jax.Array:
  x = jnp.moveaxis(x_NxBxCx_, 0, 1)
  return x.reshape(x.shape[0], -1, *x.shape[3:])[:, :length]


def _scan_chunks(options: Options, chunk_length: int, hidden, embedding, targets, weights, with_grads: bool):
  """Loss and z-loss sums and the correct sums per row `[B]` over all chunks; with `with_grads`, also dL/dhidden
  and dL/dembedding (cotangent 1)."""
  vocab = embedding.shape[0]
  confidence, low = smoothed_target(options.label_smoothing, vocab)
  offset = smoothed_target_entropy(confidence, low, vocab)
  table = embedding.astype(hidden.dtype)

  def chunk(carry, xs):
    loss_sum, correct_sum, z_loss_sum, grad_table = carry
    h_BxCxD, t_BxC, w_BxC = xs
    z_BxCxV = soft_cap(jnp.einsum("bcd,vd->bcv", h_BxCxD, table, preferred_element_type=jnp.float32),
                       options.softcap)
    max_BxC = z_BxCxV.max(-1)
    exp_BxCxV = jnp.exp(z_BxCxV - max_BxC[..., None])
    sum_exp_BxC = exp_BxCxV.sum(-1)
    log_z_BxC = max_BxC + jnp.log(sum_exp_BxC)
    z_target_BxC = jnp.take_along_axis(z_BxCxV, t_BxC[..., None], axis=-1)[..., 0]
    loss_BxC = log_z_BxC - (confidence - low) * z_target_BxC - low * z_BxCxV.sum(-1) - offset
    if options.z_loss:
      z_loss_BxC = options.z_loss * jnp.square(log_z_BxC)
      z_loss_sum += jnp.sum(w_BxC * z_loss_BxC)
      loss_BxC = loss_BxC + z_loss_BxC
    loss_sum += jnp.sum(w_BxC * loss_BxC)
    correct_sum += jnp.sum(w_BxC * (z_target_BxC >= max_BxC), axis=1)
    if not with_grads:
      return (loss_sum, correct_sum, z_loss_sum, grad_table), None
    target_BxCxV = jnp.arange(vocab, dtype=t_BxC.dtype) == t_BxC[..., None]
    p_BxCxV = exp_BxCxV / sum_exp_BxC[..., None]
    if options.z_loss:
      p_BxCxV = p_BxCxV * (1.0 + 2.0 * options.z_loss * log_z_BxC)[..., None]
    dz_BxCxV = w_BxC[..., None] * (p_BxCxV - low - jnp.where(target_BxCxV, confidence - low, 0.0))
    if options.softcap:
      dz_BxCxV = dz_BxCxV * (1.0 - jnp.square(z_BxCxV / options.softcap))
    dz_BxCxV = dz_BxCxV.astype(hidden.dtype)
    grad_h_BxCxD = jnp.einsum("bcv,vd->bcd", dz_BxCxV, table, preferred_element_type=jnp.float32)
    grad_table += jnp.einsum("bcv,bcd->vd", dz_BxCxV, h_BxCxD, preferred_element_type=jnp.float32)
    return (loss_sum, correct_sum, z_loss_sum, grad_table), grad_h_BxCxD.astype(hidden.dtype)

  grad_table = jnp.zeros(embedding.shape if with_grads else (), jnp.float32)
  zero = jnp.zeros((), jnp.float32)
  init = (zero, jnp.zeros(hidden.shape[:1], jnp.float32), zero, grad_table)
  xs = tuple(_chunks(x, chunk_length) for x in (hidden, targets, weights))
  (loss_sum, correct_sum, z_loss_sum, grad_table), grad_hidden = lax.scan(chunk, init, xs)
  if not with_grads:
    return (loss_sum, correct_sum, z_loss_sum), None
  return ((loss_sum, correct_sum, z_loss_sum),
          (_unchunk(grad_hidden, hidden.shape[1]), grad_table.astype(embedding.dtype)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _fused(options, chunk_length, hidden, embedding, targets, weights):
  return _scan_chunks(options, chunk_length, hidden, embedding, targets, weights, with_grads=False)[0]


def _fused_forward(options, chunk_length, hidden, embedding, targets, weights):
  sums, grads = _scan_chunks(options, chunk_length, hidden, embedding, targets, weights, with_grads=True)
  return sums, grads


def _fused_backward(options, chunk_length, grads, cotangents):
  del options, chunk_length
  grad_hidden, grad_embedding = grads
  scale = cotangents[0]  # the accuracy count and the z-loss part (inside the loss sum) have no gradient of their own.
  return (grad_hidden * scale.astype(grad_hidden.dtype), grad_embedding * scale.astype(grad_embedding.dtype),
          None, None)


_fused.defvjp(_fused_forward, _fused_backward)

