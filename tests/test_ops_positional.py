"""The pure positional functions: the paper's sinusoids exactly, rotary's relative-position property, ALiBi's
slopes and bias, T5's relative-position buckets (by hand and against T5's formula)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.ops import positional


def test_sinusoidal_equals_paper_formula():
  length, dim = 50, 16
  table = positional.sinusoidal(length, dim)
  assert table.shape == (length, dim) and table.dtype == np.float32
  for pos in range(length):
    for i in range(dim // 2):
      angle = pos / 10000 ** (2 * i / dim)
      assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
      assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)
  np.testing.assert_array_equal(table[0, 0::2], 0.0)
  np.testing.assert_array_equal(table[0, 1::2], 1.0)


def test_sinusoidal_in_halves_is_the_formula_with_sines_first():
  """layout="halves" (Marian's embed_positions): PE(pos, i) = sin(pos / 10000^(2i/d)), PE(pos, d/2 + i) = cos(...)."""
  length, dim = 20, 8
  table = positional.sinusoidal(length, dim, layout="halves")
  for pos in range(length):
    for i in range(dim // 2):
      angle = pos / 10000 ** (2 * i / dim)
      assert table[pos, i] == pytest.approx(math.sin(angle), abs=1e-6)
      assert table[pos, dim // 2 + i] == pytest.approx(math.cos(angle), abs=1e-6)
  with pytest.raises(ValueError, match="layout 'diagonal' is not one of"):
    positional.sinusoidal(4, 8, layout="diagonal")


def test_sinusoidal_relative_offset_is_a_linear_map():
  """Paper Sec. 3.5: PE(pos + k) is a linear function (a rotation per frequency) of PE(pos)."""
  table = positional.sinusoidal(64, 8)
  k = 5
  for i in range(4):
    w = 1 / 10000 ** (2 * i / 8)
    rot = np.array([[math.cos(k * w), -math.sin(k * w)], [math.sin(k * w), math.cos(k * w)]])
    np.testing.assert_allclose(table[:-k, 2 * i:2 * i + 2] @ rot, table[k:, 2 * i:2 * i + 2], atol=1e-5)


def test_sinusoidal_rejects_odd_dim():
  with pytest.raises(ValueError, match="even"):
    positional.sinusoidal(4, 5)


def test_rotary_scores_depend_only_on_relative_position_and_keep_norm():
  q = jax.random.normal(jax.random.PRNGKey(0), (1, 1, 2, 16))
  k = jax.random.normal(jax.random.PRNGKey(1), (1, 1, 2, 16))

  def score(m, n):
    qm = positional.apply_rotary(q, jnp.array([[m]]))
    kn = positional.apply_rotary(k, jnp.array([[n]]))
    return jnp.sum(qm * kn, -1)

  np.testing.assert_allclose(score(3, 1), score(10, 8), atol=1e-4)
  np.testing.assert_allclose(score(0, 0), jnp.sum(q * k, -1), atol=1e-5)
  assert np.abs(np.asarray(score(3, 1) - score(3, 2))).max() > 1e-3
  rotated = positional.apply_rotary(q, jnp.array([[7]]))
  np.testing.assert_allclose(jnp.linalg.norm(rotated, axis=-1), jnp.linalg.norm(q, axis=-1), rtol=1e-5)


def test_alibi_slopes_power_of_two_are_the_geometric_sequence():
  np.testing.assert_array_equal(positional.alibi_slopes(8), [1 / 2**k for k in range(1, 9)])
  np.testing.assert_array_equal(positional.alibi_slopes(4), [1 / 4, 1 / 16, 1 / 64, 1 / 256])
  np.testing.assert_array_equal(positional.alibi_slopes(1), [1 / 256])


def test_alibi_slopes_other_head_counts_follow_the_paper_recipe():
  """n not a power of 2: slopes of the closest power of 2 k, then every other slope of 2k heads."""
  np.testing.assert_allclose(positional.alibi_slopes(6), [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
  np.testing.assert_allclose(positional.alibi_slopes(12), [2**-k for k in range(1, 9)]
                             + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5], rtol=1e-6)
  assert positional.alibi_slopes(3).tolist() == [2**-4, 2**-8, 2**-2]
  with pytest.raises(ValueError, match="num_heads >= 1"):
    positional.alibi_slopes(0)


def test_alibi_bias_by_hand():
  slopes = np.array([0.5, 0.25], np.float32)
  bidirectional = positional.alibi_bias(slopes, jnp.arange(3), jnp.arange(4), causal=False)
  assert bidirectional.shape == (1, 2, 3, 4) and bidirectional.dtype == jnp.float32
  np.testing.assert_array_equal(bidirectional[0, 0], [[0, -0.5, -1, -1.5], [-0.5, 0, -0.5, -1], [-1, -0.5, 0, -0.5]])
  np.testing.assert_array_equal(bidirectional[0, 1], 0.5 * bidirectional[0, 0])
  causal = positional.alibi_bias(slopes, jnp.array([[2]]), jnp.arange(4)[None], causal=True)  # a decode step.
  np.testing.assert_array_equal(causal[0, :, 0], [[-1, -0.5, 0, 0.5], [-0.5, -0.25, 0, 0.25]])
  per_row = positional.alibi_bias(slopes, jnp.array([[0, 1], [5, 6]]), jnp.array([[0, 1], [5, 6]]), causal=True)
  np.testing.assert_array_equal(per_row[0], per_row[1])  # depends on i - j only.


@pytest.mark.parametrize("distance, bidirectional_bucket, causal_bucket", [
    # n = i - j (key before the query). Exact below max_exact (8 bidirectional, 16 causal), then
    # bidirectional: 8 + floor(8 log(n/8) / log(16)); causal: 16 + floor(16 log(n/16) / log(8)); capped.
    (0, 0, 0), (1, 1, 1), (7, 7, 7), (8, 8, 8), (11, 8, 11), (12, 9, 12), (15, 9, 15), (16, 10, 16),
    (31, 11, 21), (32, 12, 21), (63, 13, 26), (64, 14, 26), (90, 14, 29), (91, 15, 29), (99, 15, 30),
    (127, 15, 31), (128, 15, 31), (1000, 15, 31),
])
def test_relative_buckets_key_before_query_match_t5(distance, bidirectional_bucket, causal_bucket):
  relative_position = -distance  # j - i
  assert int(positional.relative_position_buckets(relative_position, bidirectional=True)) == bidirectional_bucket
  assert int(positional.relative_position_buckets(relative_position, bidirectional=False)) == causal_bucket


def test_relative_buckets_key_after_query():
  after = jnp.array([1, 7, 8, 16, 32, 64, 128, 500])  # j - i > 0
  np.testing.assert_array_equal(positional.relative_position_buckets(after, bidirectional=True),
                                16 + np.array([1, 7, 8, 10, 12, 14, 15, 15]))
  np.testing.assert_array_equal(positional.relative_position_buckets(after, bidirectional=False), 0)
  small = positional.relative_position_buckets(jnp.arange(-3, 4), bidirectional=True, num_buckets=8, max_distance=10)
  np.testing.assert_array_equal(small, [2, 2, 1, 0, 5, 6, 6])  # half 4: exact below 2, then 2 + 2 log(n/2)/log 5.


@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (8, 20), (64, 256), (10, 50)])
def test_relative_buckets_match_the_t5_formula_everywhere(num_buckets, max_distance):
  def t5(relative_position, bidirectional):  # mesh-tensorflow's _relative_position_bucket, one int at a time.
    n, offset, half = -relative_position, 0, num_buckets
    if bidirectional:
      half //= 2
      offset, n = (half if n < 0 else 0), abs(n)
    else:
      n = max(n, 0)
    max_exact = half // 2
    if n < max_exact:
      return offset + n
    return offset + min(max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                                        * (half - max_exact)), half - 1)

  relative = np.arange(-300, 301)
  for bidirectional in (True, False):
    got = positional.relative_position_buckets(relative, bidirectional=bidirectional, num_buckets=num_buckets,
                                               max_distance=max_distance)
    assert got.dtype == jnp.int32
    np.testing.assert_array_equal(got, [t5(int(r), bidirectional) for r in relative])


def test_relative_buckets_reject_too_few_buckets():
  with pytest.raises(ValueError, match="num_buckets >= 4"):
    positional.relative_position_buckets(jnp.arange(3), bidirectional=True, num_buckets=2)
