"""dot_product_attention against the explicit formula, masks, invariances and errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.ops import attention, masks


def explicit_attention(q, k, v, mask=None, bias=None):
  """softmax(Q K^T / sqrt(d_k) + bias) V per batch and head, with numpy loops (float64)."""
  q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
  batch, q_len, heads, dim = q.shape
  out = np.zeros((batch, q_len, heads, v.shape[-1]))
  for b in range(batch):
    for h in range(heads):
      logits = q[b, :, h] @ k[b, :, h].T / np.sqrt(dim)
      if bias is not None:
        logits = logits + np.broadcast_to(bias, (batch, heads) + logits.shape)[b, h]
      if mask is not None:
        m = np.broadcast_to(mask, (batch, heads) + logits.shape)[b, h]
        logits = np.where(m, logits, -np.inf)
      weights = np.exp(logits - logits.max(-1, keepdims=True))
      out[b, :, h] = (weights / weights.sum(-1, keepdims=True)) @ v[b, :, h]
  return out


def random_qkv(seed=0, batch=2, q_len=5, kv_len=7, heads=3, dim=8):
  kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(kq, (batch, q_len, heads, dim)), jax.random.normal(kk, (batch, kv_len, heads, dim)),
          jax.random.normal(kv, (batch, kv_len, heads, dim)))


def test_matches_explicit_formula_without_mask():
  q, k, v = random_qkv()
  np.testing.assert_allclose(attention.dot_product_attention(q, k, v), explicit_attention(q, k, v), atol=1e-5)


def test_matches_explicit_formula_with_padding_mask_and_bias():
  q, k, v = random_qkv(seed=1)
  kv_tokens = jnp.array([[5, 3, 2, 1, 0, 0, 0], [4, 4, 4, 4, 4, 4, 9]])
  q_tokens = jnp.array([[1, 2, 3, 4, 5], [1, 1, 1, 0, 0]])
  mask = masks.padding_mask(q_tokens, kv_tokens)
  bias = jax.random.normal(jax.random.PRNGKey(3), (1, 3, 5, 7))
  got = attention.dot_product_attention(q, k, v, mask=mask, bias=bias)
  want = explicit_attention(q, k, v, mask=np.asarray(mask) | ~np.asarray(mask).any(-1, keepdims=True), bias=bias)
  real_queries = np.asarray(q_tokens != 0)
  np.testing.assert_allclose(np.asarray(got)[real_queries], want[real_queries], atol=1e-5)


def test_causal_mask_matches_formula_and_scale_default():
  q, k, v = random_qkv(seed=2, q_len=6, kv_len=6)
  mask = masks.causal_mask(6)
  np.testing.assert_allclose(attention.dot_product_attention(q, k, v, mask=mask),
                             explicit_attention(q, k, v, mask=mask), atol=1e-5)
  # scale=1/sqrt(d) explicitly gives the same; another scale does not.
  same = attention.dot_product_attention(q, k, v, mask=mask, scale=8 ** -0.5)
  other = attention.dot_product_attention(q, k, v, mask=mask, scale=1.0)
  np.testing.assert_allclose(same, attention.dot_product_attention(q, k, v, mask=mask), atol=1e-6)
  assert np.abs(np.asarray(other - same)).max() > 1e-2


def test_fully_masked_query_is_finite():
  q, k, v = random_qkv(seed=3)
  mask = jnp.zeros((2, 1, 5, 7), bool).at[:, :, :2].set(True)
  out = attention.dot_product_attention(q, k, v, mask=mask)
  assert np.isfinite(np.asarray(out)).all()
  grads = jax.grad(lambda q: attention.dot_product_attention(q, k, v, mask=mask).sum())(q)
  assert np.isfinite(np.asarray(grads)).all()


def test_permutation_equivariance_of_queries_and_invariance_to_key_order():
  q, k, v = random_qkv(seed=4)
  perm_q = np.array([4, 2, 0, 1, 3])
  perm_k = np.array([6, 0, 5, 1, 4, 2, 3])
  base = attention.dot_product_attention(q, k, v)
  np.testing.assert_allclose(attention.dot_product_attention(q[:, perm_q], k, v), base[:, perm_q], atol=1e-5)
  np.testing.assert_allclose(attention.dot_product_attention(q, k[:, perm_k], v[:, perm_k]), base, atol=1e-5)


def test_dropout_keeps_expectation_and_needs_rng():
  q, k, v = random_qkv(seed=5, batch=1, q_len=2, kv_len=4, heads=1, dim=4)
  v = jnp.ones_like(v)
  outs = jnp.stack([attention.dot_product_attention(q, k, v, dropout_rate=0.5, dropout_rng=jax.random.PRNGKey(i))
                    for i in range(400)])
  assert abs(float(outs.mean()) - 1.0) < 0.05  # E[dropout(w) / (1-p)] . 1 = sum w = 1.
  assert float(outs.std()) > 0.1
  with pytest.raises(ValueError, match="dropout_rng"):
    attention.dot_product_attention(q, k, v, dropout_rate=0.1)


def test_split_merge_heads_round_trip_and_errors():
  x = jnp.arange(2 * 3 * 12.0).reshape(2, 3, 12)
  heads = attention.split_heads(x, 4)
  assert heads.shape == (2, 3, 4, 3)
  np.testing.assert_array_equal(attention.merge_heads(heads), x)
  np.testing.assert_array_equal(heads[0, 0, 1], x[0, 0, 3:6])
  with pytest.raises(ValueError, match="divisible"):
    attention.split_heads(x, 5)
  q, k, v = random_qkv()
  with pytest.raises(ValueError, match=r"\[batch, length, heads, head_dim\]"):
    attention.dot_product_attention(q[0], k, v)
  with pytest.raises(ValueError, match="do not match"):
    attention.dot_product_attention(q[..., :4], k, v)
