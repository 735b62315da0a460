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
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jformer.ops.losses import smoothed_target, smoothed_target_entropy

# Target tokens per chunk: a [chunk, V] float32 block is 16 MiB at V = 8192, 64 MiB at V = 32768, small enough
# to stay in cache-friendly pieces, large enough that each piece is one efficient matmul.
DEFAULT_CHUNK_TOKENS = 512


def linear_cross_entropy(hidden_BxTxD: jax.Array, embedding_VxD: jax.Array, targets_BxT: jax.Array,
                         weights_BxT: jax.Array | None = None, label_smoothing: float = 0.0, *,
                         chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                         per_row: bool = False) -> tuple[jax.Array, jax.Array, jax.Array]:
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
    per_row: return the correct sums per row, `[B]` (an example is exactly right when its row's correct sum
      equals its weight sum), instead of their total.

  Returns:
    `(loss_sum, weight_sum, correct_sum)` float32 scalars: sum of w * loss, sum of w, and the sum of w over the
    tokens whose target logit is the largest (ties count as correct; `[B]`, one per row, with `per_row`).
    Differentiable in `hidden` and `embedding` (the loss sum only).
  """
  batch, length, _ = hidden_BxTxD.shape
  if targets_BxT.shape != (batch, length) or embedding_VxD.shape[1] != hidden_BxTxD.shape[2]:
    raise ValueError(f"hidden {hidden_BxTxD.shape}, embedding {embedding_VxD.shape} and targets "
                     f"{targets_BxT.shape} disagree: expected [B, T, D], [V, D] and [B, T]")
  if weights_BxT is None:
    weights_BxT = (targets_BxT != 0).astype(jnp.float32)
  chunk_length = max(1, min(length, chunk_tokens // batch))
  loss_sum, correct_B = _fused(label_smoothing, chunk_length, hidden_BxTxD, embedding_VxD, targets_BxT,
                               weights_BxT.astype(jnp.float32))
  return loss_sum, jnp.sum(weights_BxT.astype(jnp.float32)), correct_B if per_row else jnp.sum(correct_B)


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


def _scan_chunks(label_smoothing: float, chunk_length: int, hidden, embedding, targets, weights, with_grads: bool):
  """The loss sum and the correct sums per row `[B]` over all chunks; with `with_grads`, also dL/dhidden and
  dL/dembedding (cotangent 1)."""
  vocab = embedding.shape[0]
  confidence, low = smoothed_target(label_smoothing, vocab)
  offset = smoothed_target_entropy(confidence, low, vocab)
  table = embedding.astype(hidden.dtype)

  def chunk(carry, xs):
    loss_sum, correct_sum, grad_table = carry
    h_BxCxD, t_BxC, w_BxC = xs
    z_BxCxV = jnp.einsum("bcd,vd->bcv", h_BxCxD, table, preferred_element_type=jnp.float32)
    max_BxC = z_BxCxV.max(-1)
    exp_BxCxV = jnp.exp(z_BxCxV - max_BxC[..., None])
    sum_exp_BxC = exp_BxCxV.sum(-1)
    z_target_BxC = jnp.take_along_axis(z_BxCxV, t_BxC[..., None], axis=-1)[..., 0]
    loss_BxC = max_BxC + jnp.log(sum_exp_BxC) - (confidence - low) * z_target_BxC - low * z_BxCxV.sum(-1) - offset
    loss_sum += jnp.sum(w_BxC * loss_BxC)
    correct_sum += jnp.sum(w_BxC * (z_target_BxC >= max_BxC), axis=1)
    if not with_grads:
      return (loss_sum, correct_sum, grad_table), None
    target_BxCxV = jnp.arange(vocab, dtype=t_BxC.dtype) == t_BxC[..., None]
    dz_BxCxV = w_BxC[..., None] * (exp_BxCxV / sum_exp_BxC[..., None] - low
                                   - jnp.where(target_BxCxV, confidence - low, 0.0))
    dz_BxCxV = dz_BxCxV.astype(hidden.dtype)
    grad_h_BxCxD = jnp.einsum("bcv,vd->bcd", dz_BxCxV, table, preferred_element_type=jnp.float32)
    grad_table += jnp.einsum("bcv,bcd->vd", dz_BxCxV, h_BxCxD, preferred_element_type=jnp.float32)
    return (loss_sum, correct_sum, grad_table), grad_h_BxCxD.astype(hidden.dtype)

  grad_table = jnp.zeros(embedding.shape if with_grads else (), jnp.float32)
  init = (jnp.zeros((), jnp.float32), jnp.zeros(hidden.shape[:1], jnp.float32), grad_table)
  xs = tuple(_chunks(x, chunk_length) for x in (hidden, targets, weights))
  (loss_sum, correct_sum, grad_table), grad_hidden = lax.scan(chunk, init, xs)
  if not with_grads:
    return (loss_sum, correct_sum), None
  return (loss_sum, correct_sum), (_unchunk(grad_hidden, hidden.shape[1]), grad_table.astype(embedding.dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _fused(label_smoothing, chunk_length, hidden, embedding, targets, weights):
  return _scan_chunks(label_smoothing, chunk_length, hidden, embedding, targets, weights, with_grads=False)[0]


def _fused_forward(label_smoothing, chunk_length, hidden, embedding, targets, weights):
  sums, grads = _scan_chunks(label_smoothing, chunk_length, hidden, embedding, targets, weights, with_grads=True)
  return sums, grads


def _fused_backward(label_smoothing, chunk_length, grads, cotangents):
  del label_smoothing, chunk_length
  grad_hidden, grad_embedding = grads
  scale = cotangents[0]  # the accuracy count has no gradient.
  return (grad_hidden * scale.astype(grad_hidden.dtype), grad_embedding * scale.astype(grad_embedding.dtype),
          None, None)


_fused.defvjp(_fused_forward, _fused_backward)

