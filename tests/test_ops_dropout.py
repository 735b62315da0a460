"""jformer.ops.dropout: the rate it applies, an unbiased output, and its randomness."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.ops.dropout import applied_rate, dropout


def test_applied_rate_is_the_nearest_multiple_of_one_256th():
  assert applied_rate(0.1) == 26 / 256 and applied_rate(0.3) == 77 / 256 and applied_rate(0.0) == 0.0
  assert applied_rate(1e-4) == 1 / 256  # a positive rate never rounds to no dropout.
  for bad in (-0.1, 1.0):
    with pytest.raises(ValueError, match=r"not in \[0, 1\)"):
      applied_rate(bad)


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_fraction_dropped_and_mean_match_the_applied_rate(rate):
  """Over 2^20 elements the dropped fraction is within 5 binomial standard deviations of applied_rate(rate),
  and the mean of dropout(1) is 1 (kept elements scaled by 1 / (1 - applied rate))."""
  x = jnp.ones((1024, 1024))
  y = np.asarray(dropout(x, rate, jax.random.PRNGKey(0)))
  p, n = applied_rate(rate), x.size
  dropped = np.mean(y == 0)
  assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / n)
  np.testing.assert_allclose(np.unique(y[y != 0]), [1 / (1 - p)], rtol=1e-6)
  assert abs(y.mean() - 1.0) < 5 * np.sqrt(p / (1 - p) / n)


def test_masks_depend_on_the_key_and_on_every_position():
  x = jnp.ones((7, 33), jnp.bfloat16)  # a size not divisible by 4: the last draw is cut.
  a, b = (np.asarray(dropout(x, 0.5, jax.random.PRNGKey(s))) for s in (0, 1))
  assert a.dtype == np.dtype(jnp.bfloat16) and a.shape == (7, 33)
  np.testing.assert_array_equal(a, np.asarray(dropout(x, 0.5, jax.random.PRNGKey(0))))
  assert (a != b).mean() > 0.3
  # the four bytes of a draw go to elements far apart, so no row repeats another's pattern.
  big = np.asarray(dropout(jnp.ones((64, 64)), 0.5, jax.random.PRNGKey(2))) == 0
  assert len({row.tobytes() for row in big}) == 64
  np.testing.assert_array_equal(dropout(x, 0.0, jax.random.PRNGKey(0)), x)
