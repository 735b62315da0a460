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
                     match=r"unknown attention variant 'nope'; known: \['additive', 'auto', 'chunked', 'cosine'"):
    attention.get("nope")
  assert {"chunked", "cudnn", "dot_product", "linear", "local", "pallas_gpu", "splash", "xla"} <= set(attention.available())


def test_check_refuses_missing_features_and_unknown_options():
  xla = attention.get("xla")
  with pytest.raises(ValueError, match=r"does not support \['dropout'\]"):
    xla.check(needs={"dropout", "causal"})
  with pytest.raises(ValueError, match=r"no option\(s\) \['chunk_size'\]"):
    xla.check(options={"chunk_size": 4})
  attention.get("dot_product").check(needs={"dropout", "decode"})


def test_register_twice_and_unknown_feature_fail():
  with pytest.raises(ValueError, match=r"attention variant 'dot_product' is registered twice: at jformer/attention/"
                                       r"dot_product.py:\d+ and at tests/test_attention_registry.py:\d+; rename"):
    attention.register("dot_product", supports={"causal"}, weights=attention.softmax_weights)(
        attention.dot_product.dot_product)
  with pytest.raises(ValueError, match="unknown features"):
    attention.register("other", supports={"telepathy"}, weights=attention.softmax_weights)(
        attention.dot_product.dot_product)


def test_register_requires_the_one_signature(scratch_registries):
  with pytest.raises(ValueError, match=r"'partial' must accept the keyword arguments \['bias', 'dropout_rate', "):
    attention.register("partial", supports={"causal"})(lambda query, key, value, *, causal=False, mask=None: None)


def test_options_come_from_the_signature_and_required_ones_are_checked(scratch_registries):
  with pytest.raises(ValueError, match=r"needs option\(s\) \['width'\].*\(in example_options= of the registration\)"):
    attention.register("toy", supports={"causal"})(lambda query, key, value, *, width, **masking: query)

  @attention.register("toy", supports={"causal"}, weights=attention.softmax_weights, example_options=dict(width=3))
  def toy(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
          kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, width, depth=2):
    """A toy variant."""
    return query

  variant = attention.get("toy")
  assert (list(variant.options), variant.required_options, variant.doc) == (["width", "depth"], ("width",),
                                                                            "A toy variant.")
  with pytest.raises(ValueError, match=r"'toy' needs option\(s\) \['width'\]; set e\.g\. "
                                       r"--config\.model\.attention_options\.width="):
    variant.check(needs={"causal"}, options={"depth": 3})
  variant.check(needs={"causal", "gqa"}, options={"width": 4})
  attention.get("local").check(options={})  # window_size has a default: no built-in variant requires an option.
  assert [name for name in attention.available() if attention.get(name).required_options] == ["toy"]


def test_runnable_options_fill_required_ones_from_the_examples_under_overrides(scratch_registries):
  """The one rule for sweeps and benchmarks: defaults, required options from example_options, the user's on top."""

  @attention.register("toy", supports={"causal"}, weights=attention.softmax_weights,
                      example_options=dict(width=3, depth=1))
  def toy(query, key, value, *, width: int, depth: int = 2, **masking):
    """A toy variant."""
    return query

  variant = attention.get("toy")
  assert variant.runnable_options() == {"width": 3}  # depth keeps its default, not the example's 1.
  assert variant.runnable_options({"depth": 5}) == {"width": 3, "depth": 5}
  assert variant.runnable_options({"width": 7}) == {"width": 7}
  with pytest.raises(ValueError, match=r"'toy' has no option\(s\) \['height'\]"):
    variant.runnable_options({"height": 1})
  with pytest.raises(ValueError, match=r"'toy' needs a positive int width, got 0"):
    variant.runnable_options({"width": 0})
  assert attention.get("local").runnable_options() == {}  # runs with window_size=256
  assert attention.get("additive").runnable_options({"hidden_size": 8}) == {"hidden_size": 8}


def test_registry_repeats_kv_heads_for_variants_without_gqa(scratch_registries):
  seen = []

  @attention.register("heads_as_queries", supports={"causal"}, weights=attention.softmax_weights)
  def heads_as_queries(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None,
                       q_positions=None, kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None):
    """Needs as many key/value heads as query heads."""
    seen.append(key.shape[2])
    return attention.get("dot_product").fn(query, key, value, causal=causal)

  kq, kk, kv = jax.random.split(jax.random.PRNGKey(5), 3)
  q = jax.random.normal(kq, (2, 5, 6, 4))
  k, v = (jax.random.normal(key, (2, 5, 2, 4)) for key in (kk, kv))
  variant = attention.get("heads_as_queries")
  assert "gqa" in variant.supports
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


def test_option_values_are_type_checked_once_for_every_variant():
  """An int option takes a positive int, a float option a number: at config load and at call time."""
  q = jnp.zeros((1, 4, 2, 4))
  for name, option in (("chunked", "query_chunk_size"), ("local", "window_size"), ("linear", "chunk_size"),
                       ("splash", "block_q"), ("additive", "hidden_size")):
    for bad in (0, -3, 2.5, "8", True):
      with pytest.raises(ValueError, match=f"'{name}' needs a positive int {option}, got {bad!r}"):
        attention.get(name).check(options={**attention.get(name).example_options, option: bad})
  with pytest.raises(ValueError, match=r"'local' needs a positive int window_size, got 0"):
    attention.get("local").fn(q, q, q, window_size=0)


def test_segment_ids_come_in_pairs_for_every_variant():
  q, segments = jnp.zeros((1, 4, 2, 4)), jnp.ones((1, 4), jnp.int32)
  for name in attention.available():
    variant = attention.get(name)
    if "segment_ids" in variant.supports:
      with pytest.raises(ValueError, match=f"'{name}': q_segment_ids and kv_segment_ids must be given together"):
        variant.fn(q, q, q, q_segment_ids=segments, **variant.example_options)


def test_declared_params_are_required_and_shaped_from_model_dims_and_options():
  additive = attention.get("additive")
  dims = dict(heads=8, kv_heads=2, head_dim=64, d_model=512)
  assert additive.param_shapes(dims, {"hidden_size": 32}) == {
      "query_weight": (8, 64, 32), "key_weight": (8, 64, 32), "score_weight": (8, 32)}
  assert additive.param_shapes(dims, {})["score_weight"] == (8, 64)  # the option's default
  q = jnp.zeros((1, 4, 2, 4))
  with pytest.raises(ValueError, match=r"'additive' needs params=\{key_weight, query_weight, score_weight\}"):
    additive.fn(q, q, q)


def test_a_variant_declares_what_it_computes(scratch_registries):
  """weights= has no default: a variant gives its weights or a reference formula. A plug-in written when weights=
  defaulted to softmax attention's is refused in one line that says what changed and what to pass."""
  with pytest.raises(ValueError, match=r"'opaque' declares neither weights= nor reference=.* has no default .*"
                                       r"passes weights=jformer.attention.softmax_weights"):
    attention.register("opaque", supports={"causal"})(lambda query, key, value, **masking: query)
  attention.register("opaque", supports={"causal"}, reference=attention.get("dot_product").reference)(
      lambda query, key, value, **masking: query)
  assert attention.get("opaque").weights is None
  with pytest.raises(ValueError, match="must take a `params` keyword argument"):
    attention.register("learned", supports=set(), params={"w": registry.Param((2,), jax.nn.initializers.zeros)})(
        lambda query, key, value, **masking: query)
