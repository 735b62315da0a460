"""Mask constructors: exact boolean patterns."""

import jax.numpy as jnp
import numpy as np
import pytest

from jformer.ops import masks


def test_causal_mask_is_lower_triangular():
  m = np.asarray(masks.causal_mask(4))
  assert m.shape == (1, 1, 4, 4)
  np.testing.assert_array_equal(m[0, 0], np.tril(np.ones((4, 4), bool)))


def test_causal_mask_with_positions_for_decode_step():
  # Query at position 2 against a 5-slot cache: slots 0..2 visible.
  m = np.asarray(masks.causal_mask(jnp.array([[2]]), jnp.arange(5)[None]))
  np.testing.assert_array_equal(m[0, 0, 0], [True, True, True, False, False])


def test_padding_mask():
  m = np.asarray(masks.padding_mask(jnp.array([[3, 0]]), jnp.array([[1, 2, 0]])))
  np.testing.assert_array_equal(m[0, 0], [[True, True, False], [False, False, False]])


def test_segment_mask_blocks_other_examples_and_padding():
  seg = jnp.array([[1, 1, 2, 2, 0]])
  m = np.asarray(masks.segment_mask(seg))[0, 0]
  want = np.array([[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 0]], bool)
  np.testing.assert_array_equal(m, want)


def test_combine_and_attention_mask_with_packed_positions():
  seg = jnp.array([[1, 1, 1, 2, 2]])
  pos = jnp.array([[0, 1, 2, 0, 1]])
  m = np.asarray(masks.attention_mask(5, 5, causal=True, q_segment_ids=seg, kv_segment_ids=seg,
                                      q_positions=pos, kv_positions=pos))[0, 0]
  want = np.array([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 1, 1]], bool)
  np.testing.assert_array_equal(m, want)
  assert masks.combine_masks(None, None) is None
  assert masks.attention_mask(3, 3) is None
  with pytest.raises(ValueError, match="together"):
    masks.attention_mask(3, 3, q_segment_ids=seg)
