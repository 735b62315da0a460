"""Label-smoothed cross-entropy against the explicit formula; a perfect model scores 0."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.ops import losses


def explicit_smoothed_ce(logits, targets, eps):
  logits = np.asarray(logits, np.float64)
  vocab = logits.shape[-1]
  q = np.full(logits.shape, eps / (vocab - 1))
  np.put_along_axis(q, np.asarray(targets)[..., None], 1 - eps, axis=-1)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  entropy = -np.sum(np.where(q > 0, q * np.log(np.where(q > 0, q, 1)), 0), -1)
  return -(q * logp).sum(-1) - entropy


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_matches_explicit_formula(eps):
  logits = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 11)) * 3
  targets = jnp.array([[1, 4, 10], [0, 2, 7]])
  np.testing.assert_allclose(losses.smoothed_cross_entropy(logits, targets, eps),
                             explicit_smoothed_ce(logits, targets, eps), atol=1e-5)


def test_perfect_model_scores_zero():
  eps, vocab = 0.1, 7
  targets = jnp.array([[3, 5]])
  q = np.full((1, 2, vocab), eps / (vocab - 1))
  np.put_along_axis(q, np.asarray(targets)[..., None], 1 - eps, axis=-1)
  np.testing.assert_allclose(losses.smoothed_cross_entropy(jnp.log(q), targets, eps), 0.0, atol=1e-6)
  one_hot_logits = jnp.where(jax.nn.one_hot(targets, vocab) > 0, 50.0, -50.0)
  np.testing.assert_allclose(losses.smoothed_cross_entropy(one_hot_logits, targets, 0.0), 0.0, atol=1e-6)


def test_weights_default_to_non_padding_and_accuracy():
  logits = jax.nn.one_hot(jnp.array([[2, 2, 1, 0]]), 4) * 10
  targets = jnp.array([[2, 3, 1, 0]])
  loss_sum, weight_sum = losses.weighted_cross_entropy(logits, targets)
  per_token = losses.smoothed_cross_entropy(logits, targets)
  assert float(weight_sum) == 3.0
  np.testing.assert_allclose(loss_sum, per_token[0, :3].sum(), rtol=1e-6)
  correct, total = losses.weighted_accuracy(logits, targets)
  assert (float(correct), float(total)) == (2.0, 3.0)
  correct, total = losses.weighted_accuracy(logits, targets, jnp.array([[0.0, 1.0, 1.0, 1.0]]))
  assert (float(correct), float(total)) == (2.0, 3.0)


def test_shape_mismatch_names_shapes():
  with pytest.raises(ValueError, match=r"\(1, 2, 5\).*\(1, 3\)"):
    losses.smoothed_cross_entropy(jnp.zeros((1, 2, 5)), jnp.zeros((1, 3), jnp.int32))
