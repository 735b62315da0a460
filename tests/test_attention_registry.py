"""The attention registry: lookup, capability and option checks, the one signature, key/value head repetition.

Every variant against the reference: tests/test_attention_variants.py.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import attention
from jformer.attention import registry


def test_unknown_variant_lists_known_ones():
  with pytest.raises(KeyError,
                     match=r"unknown attention variant 'nope'; known variants: \['auto', 'chunked', 'dot_product'"):
    attention.get("nope")
  assert {"chunked", "dot_product", "flash_pallas", "linear", "local", "xla"} <= set(attention.available())


def test_check_refuses_missing_features_and_unknown_options():
  xla = attention.get("xla")
  with pytest.raises(ValueError, match=r"does not support \['dropout'\]"):
    xla.check(needs={"dropout", "causal"})
  with pytest.raises(ValueError, match=r"no option\(s\) \['chunk_size'\]"):
    xla.check(options={"chunk_size": 4})
  attention.get("dot_product").check(needs={"dropout", "decode"})


def test_register_twice_and_unknown_feature_fail():
  with pytest.raises(ValueError, match="registered twice"):
    attention.register("dot_product", supports={"causal"})(attention.dot_product.dot_product)
  with pytest.raises(ValueError, match="unknown features"):
    attention.register("other", supports={"telepathy"})


@pytest.fixture
def scratch_registry(monkeypatch):
  """Registrations made in a test are dropped after it."""
  monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_register_requires_the_one_signature(scratch_registry):
  with pytest.raises(ValueError, match=r"'partial' must accept the keyword arguments \['bias', 'dropout_rate', "):
    attention.register("partial", supports={"causal"})(lambda query, key, value, *, causal=False, mask=None: None)


def test_options_come_from_the_signature_and_required_ones_are_checked(scratch_registry):
  @attention.register("toy", supports={"causal"})
  def toy(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
          kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, width, depth=2):
    """A toy variant."""
    return query

  variant = attention.get("toy")
  assert (variant.options, variant.required_options, variant.doc) == (("width", "depth"), ("width",), "A toy variant.")
  with pytest.raises(ValueError, match=r"'toy' needs option\(s\) \['width'\]; set e\.g\. "
                                       r"--config\.model\.attention_options\.width="):
    variant.check(needs={"causal"}, options={"depth": 3})
  variant.check(needs={"causal", "gqa"}, options={"width": 4})
  with pytest.raises(ValueError, match=r"'local' needs option\(s\) \['window_size'\]"):
    attention.get("local").check(options={})


def test_registry_repeats_kv_heads_for_variants_without_gqa(scratch_registry):
  seen = []

  @attention.register("heads_as_queries", supports={"causal"})
  def heads_as_queries(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None,
                       q_positions=None, kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None):
    """Needs as many key/value heads as query heads."""
    seen.append(key.shape[2])
    return attention.get("dot_product").fn(query, key, value, causal=causal)

  kq, kk, kv = jax.random.split(jax.random.PRNGKey(5), 3)
  q = jax.random.normal(kq, (2, 5, 6, 4))
  k, v = (jax.random.normal(key, (2, 5, 2, 4)) for key in (kk, kv))
  variant = attention.get("heads_as_queries")
  assert not variant.native_gqa and "gqa" in variant.supports
  reference = jax.jit(functools.partial(attention.get("dot_product").fn, causal=True))
  got = jax.jit(functools.partial(variant.fn, causal=True))(q, k, v)
  assert seen == [6]
  # Query heads 0-2 use key/value head 0, heads 3-5 head 1; the reference takes the 2 heads natively.
  np.testing.assert_allclose(got, reference(q, k, v), atol=1e-6)
  np.testing.assert_allclose(got[:, :, 3:], reference(q[:, :, 3:], k[:, :, 1:], v[:, :, 1:]), atol=1e-6)
  with pytest.raises(ValueError, match=r"'heads_as_queries' does not support \['bias'\], which this call asks"):
    variant.fn(q, k, v, bias=jnp.zeros((1, 6, 5, 5)))


def test_shapes_are_checked_with_the_reason():
  q = jnp.zeros((2, 5, 6, 4))
  with pytest.raises(ValueError, match=r"query heads must be a multiple of the key/value heads"):
    attention.get("chunked").fn(q, jnp.zeros((2, 5, 4, 4)), jnp.zeros((2, 5, 4, 4)))
  with pytest.raises(ValueError, match=r"expects \[batch, length, heads, head_dim\] arrays"):
    attention.get("local").fn(q[0], q[0], q[0], window_size=2)
