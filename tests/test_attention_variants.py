"""Every registered attention variant against its reference, forward and gradients, in every setting the model uses.

The matrix is parametrized over the registry, so a new variant is checked without touching this file, with the
`example_options` it registered: each against its `reference` (by default its attention weights times the
values: softmax attention for the kernels, the windowed softmax for `local`, the normalised kernel for `linear`,
softmax over the learned score for `additive`/`general`/`cosine`), with random values for its declared
parameters, gradients wrt those parameters included. A variant is skipped for a setting only because it does
not declare a needed feature, and `test_undeclared_features_are_refused` checks that asking for one fails. The
settings and the checks live in tests/helpers.py (tests/test_plugins.py runs them on a plug-in variant).

The default test run checks each variant in its `representative_settings` (together they ask for every feature it
declares, and one has S != T); the slow run checks the whole matrix.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import (SETTINGS, check_decode_steps_match_full_forward, check_undeclared_features_are_refused,
                     check_variant_matches_reference, options_of, random_qkv, representative_settings)
from jformer import attention
from jformer.ops import masks


def matrix():
  """(variant, setting) for every variant and setting: the variant's `representative_settings` in the default run,
  the rest marked slow."""
  for name in attention.available():
    fast = representative_settings(attention.get(name).supports)
    for setting in sorted(SETTINGS):
      yield pytest.param(name, setting, id=f"{name}-{setting}", marks=() if setting in fast else pytest.mark.slow)


@pytest.mark.parametrize("name, setting", matrix())
def test_variant_matches_reference(name, setting):
  check_variant_matches_reference(name, setting)


@pytest.mark.parametrize("name", attention.available())
def test_decode_steps_match_full_forward(name):
  """Step t: one query at position t against a cache of S slots, slots after t holding garbage (K < H heads)."""
  check_decode_steps_match_full_forward(name)


@pytest.mark.parametrize("name", attention.available())
def test_undeclared_features_are_refused(name):
  """`check` refuses what a variant does not declare, and so does a call that asks for it."""
  check_undeclared_features_are_refused(name)


def test_local_is_windowed_and_linear_is_not_softmax():
  """The two non-reference variants really differ from full softmax attention on the same inputs."""
  q, k, v = random_qkv(14)
  full, windowed, linear = jax.jit(lambda q, k, v: [attention.get(name).fn(q, k, v, causal=True, **options_of(
      name)) for name in ("dot_product", "local", "linear")])(q, k, v)
  window = options_of("local")["window_size"]
  np.testing.assert_allclose(windowed[:, :window], full[:, :window], atol=1e-6)  # the window covers them all
  assert np.abs(np.asarray(windowed[:, window:] - full[:, window:])).max() > 0.1
  assert np.abs(np.asarray(linear - full)).max() > 0.1
  # Query 0 sees only key 0: every variant returns value 0.
  for out in (windowed, linear):
    np.testing.assert_allclose(out[:, 0], v[:, 0], atol=1e-6)


def test_window_mask_is_the_window():
  """The masks the window settings are checked against, written out: `local` of size 2 is (1, 1), |i - j| < 2,
  and 0 <= i - j < 2 when causal; (2, 0) sees two keys back and none ahead."""
  local = masks.window_mask(jnp.arange(4), jnp.arange(4), (1, 1))[0, 0]
  local_causal = masks.attention_mask(4, 4, causal=True, window=(1, 1))[0, 0]
  back = masks.window_mask(jnp.arange(4), jnp.arange(4), (2, 0))[0, 0]
  np.testing.assert_array_equal(local, [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]])
  np.testing.assert_array_equal(local_causal, [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]])
  np.testing.assert_array_equal(back, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1]])
