"""`hedgehog` (learned feature maps, Zhang et al. 2024) against its formula written out here; the generic variant
tests (tests/test_attention_variants.py) check its kernel against its weights for every masking it declares."""

import jax
import jax.numpy as jnp
import numpy as np

from jformer import attention
from jformer.attention.hedgehog import PARAMS, feature_map


def test_hedgehog_is_linear_attention_over_softmax_features():
  """out_i = sum_{j<=i} phi_q(q_i).phi_k(k_j) v_j / sum_{j<=i} phi_q(q_i).phi_k(k_j), phi(x) = softmax(xW) (+)
  softmax(-xW), causal, in chunks of 3 over 7 tokens (the running state crosses chunk boundaries)."""
  keys = jax.random.split(jax.random.PRNGKey(0), 5)
  q, k, v = (jax.random.normal(key, (2, 7, 2, 4)) for key in keys[:3])
  params = {"query_map": jax.random.normal(keys[3], (2, 4, 4)), "key_map": jax.random.normal(keys[4], (2, 4, 4))}
  assert {name: p.shape for name, p in PARAMS.items()} == {"query_map": ("heads", "head_dim", "head_dim"),
                                                           "key_map": ("heads", "head_dim", "head_dim")}

  def phi(x, w):
    z = jnp.einsum("blhk,hkf->blhf", x, w)
    return jnp.concatenate([jnp.exp(z) / jnp.exp(z).sum(-1, keepdims=True),
                            jnp.exp(-z) / jnp.exp(-z).sum(-1, keepdims=True)], -1)

  np.testing.assert_allclose(feature_map(q, params["query_map"]), phi(q, params["query_map"]), rtol=1e-6)
  kernel = jnp.einsum("bthf,bshf->bhts", phi(q, params["query_map"]), phi(k, params["key_map"]))
  kernel = kernel * jnp.tril(jnp.ones((7, 7)))
  want = jnp.einsum("bhts,bshd->bthd", kernel / kernel.sum(-1, keepdims=True), v)
  got = attention.get("hedgehog").fn(q, k, v, params=params, causal=True, chunk_size=3)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
