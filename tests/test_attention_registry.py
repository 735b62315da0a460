"""The attention registry: lookup errors, capability checks, and xla == dot_product in every setting."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import attention


def test_unknown_variant_lists_known_ones():
  with pytest.raises(KeyError, match=r"unknown attention variant 'nope'; known variants: \['dot_product', 'xla'"):
    attention.get("nope")
  assert {"dot_product", "xla"} <= set(attention.available())


def test_check_refuses_missing_features_and_unknown_options():
  xla = attention.get("xla")
  with pytest.raises(ValueError, match=r"does not support \['dropout'\]"):
    xla.check(needs={"dropout", "causal"})
  with pytest.raises(ValueError, match=r"no option\(s\) \['chunk_size'\]"):
    xla.check(options={"chunk_size": 4})
  attention.get("dot_product").check(needs={"dropout", "decode"})


def test_register_twice_and_unknown_feature_fail():
  with pytest.raises(ValueError, match="registered twice"):
    attention.register("dot_product", supports={"causal"})(lambda *a, **k: None)
  with pytest.raises(ValueError, match="unknown features"):
    attention.register("other", supports={"telepathy"})


SETTINGS = {
    "encoder_padding": dict(q_segment_ids=jnp.array([[1, 1, 1, 0], [1, 1, 1, 1]]),
                            kv_segment_ids=jnp.array([[1, 1, 1, 0], [1, 1, 1, 1]])),
    "causal": dict(causal=True),
    "packed_causal": dict(causal=True, q_segment_ids=jnp.array([[1, 1, 2, 2], [1, 2, 2, 0]]),
                          kv_segment_ids=jnp.array([[1, 1, 2, 2], [1, 2, 2, 0]]),
                          q_positions=jnp.array([[0, 1, 0, 1], [0, 0, 1, 0]]),
                          kv_positions=jnp.array([[0, 1, 0, 1], [0, 0, 1, 0]])),
    "bias": dict(bias=jax.random.normal(jax.random.PRNGKey(9), (1, 2, 4, 4))),
}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_xla_matches_reference(setting):
  kq, kk, kv = jax.random.split(jax.random.PRNGKey(0), 3)
  q, k, v = (jax.random.normal(key, (2, 4, 2, 8)) for key in (kq, kk, kv))
  kwargs = SETTINGS[setting]
  ref_fn, xla_fn = attention.get("dot_product").fn, attention.get("xla").fn
  valid = np.ones((2, 4), bool) if "q_segment_ids" not in kwargs else np.asarray(kwargs["q_segment_ids"] != 0)
  np.testing.assert_allclose(np.asarray(xla_fn(q, k, v, **kwargs))[valid],
                             np.asarray(ref_fn(q, k, v, **kwargs))[valid], atol=1e-5)
  loss = lambda fn: lambda q, k, v: jnp.sum(jnp.where(valid[:, :, None, None], fn(q, k, v, **kwargs), 0) ** 2)
  for g_ref, g_xla in zip(jax.grad(loss(ref_fn), (0, 1, 2))(q, k, v), jax.grad(loss(xla_fn), (0, 1, 2))(q, k, v)):
    np.testing.assert_allclose(g_xla, g_ref, atol=1e-5)


def test_xla_decode_step_matches_reference():
  kq, kk, kv = jax.random.split(jax.random.PRNGKey(1), 3)
  q = jax.random.normal(kq, (2, 1, 2, 8))
  k, v = (jax.random.normal(key, (2, 6, 2, 8)) for key in (kk, kv))
  kwargs = dict(causal=True, q_positions=jnp.array([[3], [3]]), kv_positions=jnp.arange(6)[None])
  np.testing.assert_allclose(attention.get("xla").fn(q, k, v, **kwargs),
                             attention.get("dot_product").fn(q, k, v, **kwargs), atol=1e-5)
  # Equal to attending over the 4 filled slots only.
  np.testing.assert_allclose(attention.get("dot_product").fn(q, k[:, :4], v[:, :4]),
                             attention.get("dot_product").fn(q, k, v, **kwargs), atol=1e-5)
