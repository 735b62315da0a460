"""jformer.ops.dropout: the rate it applies, an unbiased output, and its randomness (the hash's words uniform and
independent of their neighbours')."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.ops.dropout import applied_rate, dropout, random_words


def test_applied_rate_is_the_rate_to_two_to_the_minus_32():
  assert abs(applied_rate(0.1) - 0.1) < 2**-32 and abs(applied_rate(0.3) - 0.3) < 2**-32 and applied_rate(0.0) == 0.0
  assert applied_rate(1e-12) == 2**-32  # a positive rate never rounds to no dropout.
  assert applied_rate(1 - 1e-12) == 1 - 2**-32  # nor to dropping everything.
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
  x = jnp.ones((7, 33), jnp.bfloat16)
  a, b = (np.asarray(dropout(x, 0.5, jax.random.PRNGKey(s))) for s in (0, 1))
  assert a.dtype == np.dtype(jnp.bfloat16) and a.shape == (7, 33)
  np.testing.assert_array_equal(a, np.asarray(dropout(x, 0.5, jax.random.PRNGKey(0))))
  assert (a != b).mean() > 0.3
  # neighbouring indices get unrelated draws, so no row repeats another's pattern.
  big = np.asarray(dropout(jnp.ones((64, 64)), 0.5, jax.random.PRNGKey(2))) == 0
  assert len({row.tobytes() for row in big}) == 64
  np.testing.assert_array_equal(dropout(x, 0.0, jax.random.PRNGKey(0)), x)


def test_words_are_uniform_distinct_and_uncorrelated_with_their_neighbours():
  """2^20 words of one key: all distinct (a bijection of the index), each of 16 bit positions set in half of them
  (within 5 standard deviations), the 256 values of the top byte equally frequent (chi-square, 255 degrees of
  freedom, below its 99.9% point 330.5), and adjacent words' top bits uncorrelated (|r| < 5 / sqrt(n))."""
  words = np.asarray(random_words(jax.random.PRNGKey(3), (1024, 1024))).ravel()
  n = words.size
  assert len(np.unique(words)) == n
  for bit in (0, 1, 7, 8, 15, 16, 23, 24, 25, 26, 27, 28, 29, 30, 31, 12):
    assert abs(((words >> bit) & 1).mean() - 0.5) < 5 * 0.5 / np.sqrt(n)
  counts = np.bincount(words >> 24, minlength=256)
  assert ((counts - n / 256) ** 2 / (n / 256)).sum() < 330.5
  top = (words >> 31).astype(np.float64)
  assert abs(np.corrcoef(top[:-1], top[1:])[0, 1]) < 5 / np.sqrt(n)
  assert abs(np.corrcoef(top[:-1024], top[1024:])[0, 1]) < 5 / np.sqrt(n)  # the element below, a row apart.


def test_words_refuse_more_elements_than_draws():
  with pytest.raises(ValueError, match=r"exceed 2\^32"):
    jax.eval_shape(lambda: random_words(jax.random.PRNGKey(0), (2**16, 2**16 + 1)))
