"""The fused projection + cross-entropy against the full logits: same loss, accuracy and gradients, less memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.ops import losses
from jformer.ops.linear_cross_entropy import linear_cross_entropy


def inputs(batch=3, length=7, d=16, vocab=50, seed=0):
  k = jax.random.split(jax.random.PRNGKey(seed), 4)
  hidden = jax.random.normal(k[0], (batch, length, d))
  embedding = jax.random.normal(k[1], (vocab, d)) * d**-0.5
  targets = jax.random.randint(k[2], (batch, length), 0, vocab)
  weights = (jax.random.uniform(k[3], (batch, length)) > 0.3).astype(jnp.float32) * 1.5
  return hidden, embedding, targets, weights


def reference(hidden, embedding, targets, weights, eps):
  logits = jnp.einsum("btd,vd->btv", hidden, embedding)
  loss_sum, weight_sum = losses.weighted_cross_entropy(logits, targets, weights, eps)
  correct, _ = losses.weighted_accuracy(logits, targets, weights)
  return loss_sum, weight_sum, correct


# One token, chunks not dividing T, one chunk; each with label smoothing or not, the two alternating in the default run
# (smoothing changes the loss, not the chunking), all eight in the slow run.
@pytest.mark.parametrize("chunk_tokens, eps", [
    pytest.param(chunk_tokens, eps, marks=() if (index + (eps > 0)) % 2 == 0 else pytest.mark.slow)
    for index, chunk_tokens in enumerate([1, 6, 7, 1000]) for eps in (0.0, 0.1)])
def test_matches_full_logits_loss_and_gradients(eps, chunk_tokens):
  hidden, embedding, targets, weights = inputs()
  fused = lambda h, e: linear_cross_entropy(h, e, targets, weights, eps, chunk_tokens=chunk_tokens)
  ref = lambda h, e: reference(h, e, targets, weights, eps)
  for got, want in zip(jax.jit(fused)(hidden, embedding), ref(hidden, embedding)):
    np.testing.assert_allclose(got, want, rtol=1e-5)
  grads = jax.jit(jax.grad(lambda h, e: fused(h, e)[0], argnums=(0, 1)))(hidden, embedding)
  want = jax.grad(lambda h, e: ref(h, e)[0], argnums=(0, 1))(hidden, embedding)
  for got, expected in zip(grads, want):
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_default_weights_skip_padding_and_cotangent_scales_gradients():
  hidden, embedding, targets, _ = inputs(seed=1)
  targets = targets.at[:, -2:].set(0)
  loss_sum, weight_sum, _ = linear_cross_entropy(hidden, embedding, targets, label_smoothing=0.1)
  want = reference(hidden, embedding, targets, (targets != 0).astype(jnp.float32), 0.1)
  np.testing.assert_allclose(loss_sum, want[0], rtol=1e-5)
  assert weight_sum == np.sum(np.asarray(targets) != 0)
  # The backward multiplies the gradient computed in the forward by the cotangent: mean = sum / weight_sum.
  mean = lambda h: linear_cross_entropy(h, embedding, targets, label_smoothing=0.1)[0] / weight_sum
  ref_mean = lambda h: reference(h, embedding, targets, (targets != 0).astype(jnp.float32), 0.1)[0] / weight_sum
  np.testing.assert_allclose(jax.grad(mean)(hidden), jax.grad(ref_mean)(hidden), rtol=1e-4, atol=1e-7)


def test_perfect_prediction_scores_zero_and_counts_correct():
  vocab, d = 5, 5
  embedding = 30.0 * jnp.eye(vocab, d)
  targets = jnp.array([[1, 2, 3, 4]])
  loss_sum, weight_sum, correct = linear_cross_entropy(jax.nn.one_hot(targets, d), embedding, targets)
  np.testing.assert_allclose(loss_sum, 0.0, atol=1e-6)
  assert weight_sum == 4 and correct == 4


def test_bfloat16_hidden_keeps_float32_embedding_gradient():
  hidden, embedding, targets, weights = inputs()
  grads = jax.grad(lambda h, e: linear_cross_entropy(h, e, targets, weights, 0.1)[0], argnums=(0, 1))(
      hidden.astype(jnp.bfloat16), embedding)
  assert grads[0].dtype == jnp.bfloat16 and grads[1].dtype == jnp.float32
  want = jax.grad(lambda e: reference(hidden, e, targets, weights, 0.1)[0])(embedding)
  np.testing.assert_allclose(grads[1], want, rtol=0.05, atol=0.05 * float(jnp.abs(want).max()))


def test_never_holds_the_full_logits():
  batch, length, d, vocab = 4, 256, 32, 4096
  hidden, embedding, targets, weights = inputs(batch, length, d, vocab)
  grad = jax.jit(jax.grad(lambda h, e: linear_cross_entropy(h, e, targets, weights, 0.1, chunk_tokens=64)[0],
                          argnums=(0, 1)))
  temp = grad.lower(hidden, embedding).compile().memory_analysis().temp_size_in_bytes
  logits_bytes = batch * length * vocab * 4
  assert temp < logits_bytes / 4, (temp, logits_bytes)


def test_shape_mismatch_is_a_clear_error():
  hidden, embedding, targets, _ = inputs()
  with pytest.raises(ValueError, match=r"expected \[B, T, D\], \[V, D\] and \[B, T\]"):
    linear_cross_entropy(hidden, embedding[:, :8], targets)
