"""Positional encodings: the paper's formula exactly, and rotary's relative-position property."""

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
