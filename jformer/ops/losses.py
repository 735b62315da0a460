"""Token-level losses and metrics: label-smoothed cross-entropy (paper Sec. 5.4), the z-loss, and accuracy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def smoothed_cross_entropy(logits_BxLxV: jax.Array, targets_BxL: jax.Array,
                           label_smoothing: float = 0.0) -> jax.Array:
  """Per-token cross-entropy against the label-smoothed target distribution, minus its entropy.

  The target puts `1 - eps` on the true token and `eps / (V - 1)` on every other token. Subtracting the
  entropy of that distribution (the lowest achievable loss) makes a perfect model score exactly 0, so the
  number is a KL divergence and comparable across smoothing values.

  Args:
    logits_BxLxV: unnormalised scores, `[B, L, V]`.
    targets_BxL: int token ids, `[B, L]`.
    label_smoothing: eps in [0, 1).

  Returns:
    `[B, L]` float32 losses (unweighted).
  """
  if logits_BxLxV.shape[:-1] != targets_BxL.shape:
    raise ValueError(f"logits {logits_BxLxV.shape} and targets {targets_BxL.shape} disagree: "
                     "expected logits [batch, length, vocab] and targets [batch, length]")
  vocab = logits_BxLxV.shape[-1]
  confidence, low = smoothed_target(label_smoothing, vocab)
  log_probs = jax.nn.log_softmax(logits_BxLxV.astype(jnp.float32), axis=-1)
  target_log_prob = jnp.take_along_axis(log_probs, targets_BxL[..., None], axis=-1)[..., 0]
  # -sum_v q(v) log p(v) with q = low everywhere plus (confidence - low) on the target, without a one-hot.
  loss = -(confidence - low) * target_log_prob - low * jnp.sum(log_probs, axis=-1)
  return loss - smoothed_target_entropy(confidence, low, vocab)


def weighted_cross_entropy(logits_BxLxV: jax.Array, targets_BxL: jax.Array, weights_BxL: jax.Array | None = None,
                           label_smoothing: float = 0.0) -> tuple[jax.Array, jax.Array]:
  """Sum of per-token smoothed cross-entropy times weights, and the sum of weights.

  `weights_BxL` defaults to `targets != 0` (padding id 0 carries no loss). Returns `(loss_sum, weight_sum)`;
  the mean loss is their ratio (kept apart so data-parallel shards can be summed before dividing).
  """
  weights_BxL = _default_weights(targets_BxL, weights_BxL)
  loss = smoothed_cross_entropy(logits_BxLxV, targets_BxL, label_smoothing)
  return jnp.sum(loss * weights_BxL), jnp.sum(weights_BxL)


def weighted_z_loss(logits_BxLxV: jax.Array, targets_BxL: jax.Array,
                    weights_BxL: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Sum of (log Z)^2 times weights, Z = sum_v exp(logits_v) the softmax normaliser of each token, and the sum of
  weights: the z-loss of PaLM (t5x `cross_entropy_with_logits`), before its weight (e.g. 1e-4). It pulls log Z
  towards 0 (self-normalised logits), which keeps the logits from drifting in low precision."""
  weights_BxL = _default_weights(targets_BxL, weights_BxL)
  log_z = jax.nn.logsumexp(logits_BxLxV.astype(jnp.float32), axis=-1)
  return jnp.sum(jnp.square(log_z) * weights_BxL), jnp.sum(weights_BxL)


def weighted_accuracy(logits_BxLxV: jax.Array, targets_BxL: jax.Array,
                      weights_BxL: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """Number of (weighted) tokens whose argmax is the target, and the sum of weights."""
  weights_BxL = _default_weights(targets_BxL, weights_BxL)
  correct = (jnp.argmax(logits_BxLxV, axis=-1) == targets_BxL).astype(jnp.float32)
  return jnp.sum(correct * weights_BxL), jnp.sum(weights_BxL)


def _default_weights(targets_BxL, weights_BxL):
  if weights_BxL is None:
    return (targets_BxL != 0).astype(jnp.float32)
  return weights_BxL.astype(jnp.float32)


def smoothed_target(label_smoothing: float, vocab: int) -> tuple[float, float]:
  """(confidence, low): the smoothed target puts `confidence = 1 - eps` on the true token and `low = eps / (V - 1)`
  on each of the others."""
  if not 0.0 <= label_smoothing < 1.0 or vocab < 2:
    raise ValueError(f"label smoothing needs 0 <= eps < 1 and a vocabulary of 2 or more; got eps={label_smoothing}, "
                     f"vocab={vocab}")
  return 1.0 - label_smoothing, label_smoothing / (vocab - 1)


def smoothed_target_entropy(confidence: float, low: float, vocab: int) -> float:
  """Entropy of the smoothed target: -(c log c + (V-1) l log l), with 0 log 0 = 0."""
  xlogx = lambda p: float(p * np.log(p)) if p > 0 else 0.0
  return -(xlogx(confidence) + (vocab - 1) * xlogx(low))
