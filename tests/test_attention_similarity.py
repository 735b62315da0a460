"""What is particular to each similarity variant (their formulas are checked in tests/test_attention_variants.py):
the relations between them and the paper's scaled dot product, and cosine's scale invariance."""

import jax
import jax.numpy as jnp
import numpy as np

from jformer import attention
from jformer.models.config import TransformerConfig
from jformer.registry import init_params

B, T, H, D = 2, 11, 4, 16


def qkv(seed=0):
  kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
  return tuple(jax.random.normal(k, (B, T, H, D)) for k in (kq, kk, kv))


def initial_params(name, **options):
  variant = attention.get(name)
  dims = variant.param_dims(dict(heads=H, kv_heads=H, head_dim=D, d_model=H * D), options)
  return init_params(variant.params, dims, jax.random.PRNGKey(1))


def test_unscaled_is_dot_product_with_queries_times_sqrt_dk():
  """softmax(Q K^T) V = softmax((sqrt(d_k) Q) K^T / sqrt(d_k)) V, chunked (3 x 4 blocks) or not."""
  q, k, v = qkv()
  unscaled = attention.get("dot_product_unscaled").fn(q, k, v, causal=True, query_chunk_size=3, key_chunk_size=4)
  np.testing.assert_allclose(unscaled, attention.get("dot_product").fn(q * D**0.5, k, v, causal=True), atol=1e-5)


def test_general_starts_as_the_papers_scaled_dot_product():
  """W_h = I / sqrt(d_k) at initialisation: q^T W k = q.k / sqrt(d_k)."""
  q, k, v = qkv(1)
  general = attention.get("general").fn(q, k, v, params=initial_params("general"), causal=True)
  np.testing.assert_allclose(general, attention.get("dot_product").fn(q, k, v, causal=True), atol=1e-5)


def test_cosine_ignores_query_and_key_norms_and_learns_a_temperature_per_head():
  q, k, v = qkv(2)
  cosine = attention.get("cosine")
  params = initial_params("cosine")
  np.testing.assert_allclose(params["log_temperature"], np.log(10.0) * np.ones(H), rtol=1e-6)
  out = cosine.fn(q, k, v, params=params)
  norms = jax.random.uniform(jax.random.PRNGKey(3), (B, T, H, 1), minval=0.1, maxval=10.0)
  np.testing.assert_allclose(cosine.fn(q * norms, k / norms, v, params=params), out, atol=1e-5)
  sharper = cosine.weights(q, k, params={"log_temperature": jnp.log(jnp.array([1.0, 10.0, 50.0, 100.0]))})
  assert np.all(np.diff(np.asarray(sharper.max(-1)).mean((0, 2))) > 0)  # higher temperature, peakier weights


def test_additive_is_bahdanaus_score_written_out():
  """One (query, key) pair by hand: v_a . tanh(W_q q + W_k k) for head 1."""
  q, k, _ = qkv(4)
  params = initial_params("additive", hidden_size=6)
  weights = attention.get("additive").weights(q, k, params=params, hidden_size=6)
  h, i = 1, 3
  scores = np.array([np.asarray(params["score_weight"][h]) @ np.tanh(
      np.asarray(q[0, i, h]) @ np.asarray(params["query_weight"][h]) + np.asarray(k[0, j, h]) @
      np.asarray(params["key_weight"][h])) for j in range(T)])
  np.testing.assert_allclose(weights[0, h, i], np.exp(scores) / np.exp(scores).sum(), atol=1e-5)


def test_similarity_variants_are_selectable_by_config_with_their_options():
  config = TransformerConfig.from_config(dict(vocab_size=50, d_model=64, num_heads=4, attention="additive",
                                              attention_options={"hidden_size": 32}))
  assert config.attention_variant.param_shapes(config.dims, dict(config.attention_options))["score_weight"] == (4, 32)
