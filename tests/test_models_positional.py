"""ALiBi, T5 relative positions and grouped-query attention: the pure functions by hand, then every
positional option x key/value head count through the model's invariances (causality, cache, packing, padding).

The model checks run eagerly: for models this small an eager apply (~0.1 s once the op cache is warm) is
cheaper than compiling each of the 18 configurations.
"""

import functools
import math
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import config as config_lib
from jformer import models
from jformer.attention import registry
from jformer.ops import positional
from test_models import decode_step_by_step

POSITIONAL = ["sinusoidal", "learned", "rotary", "alibi", "relative", "none"]
HEADS = 4
KV_HEADS = [HEADS, 2, 1]
DEMO = pathlib.Path(__file__).resolve().parents[1] / "configs" / "demo.py"


def load(**overrides):
  base = {"model.vocab_size": 50, "model.d_model": 32, "model.num_heads": HEADS, "model.d_ff": 64,
          "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, "model.max_length": 32,
          "data.max_length": 32}
  base.update(overrides)
  return config_lib.load(DEMO, base)


def tokens(seed, shape):
  return jax.random.randint(jax.random.PRNGKey(seed), shape, 1, 50)


def source_and_target():
  """The `[3, 8]` sources (the last one padded) and `[3, 6]` targets most tests share (one eager op cache)."""
  return tokens(0, (3, 8)).at[2, 5:].set(0), tokens(1, (3, 6))


@functools.lru_cache(maxsize=None)
def model_and_params(positional_option, kv_heads):
  model = models.build(load(**{"model.positional": positional_option, "model.num_kv_heads": kv_heads}))
  return model, nn.meta.unbox(model.init(jax.random.PRNGKey(0), *source_and_target()))


# ---------------------------------------------------------------------------------------------- pure functions


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


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize("overrides, reason", [
    ({"model.num_kv_heads": 3}, r"num_kv_heads=3 does not divide num_heads=4"),
    ({"model.num_kv_heads": -1}, r"num_kv_heads=-1 does not divide num_heads=4"),
    ({"model.positional": "relative", "model.relative_num_buckets": 2}, "relative_num_buckets >= 4"),
    ({"model.positional": "relative", "model.relative_max_distance": 16}, "relative_max_distance > "),
])
def test_invalid_model_options_fail_at_load(overrides, reason):
  with pytest.raises(ValueError, match=reason):
    load(**overrides)


@pytest.mark.parametrize("overrides, reason", [
    ({"model.positional": "alibi"}, r"does not support \['bias'\].*\(model.positional='alibi' needs 'bias'\)"),
    ({"model.positional": "relative"}, r"does not support \['bias'\].*\(model.positional='relative' needs 'bias'\)"),
    ({"model.num_kv_heads": 2}, r"does not support \['gqa'\].*\(model.num_kv_heads=2 needs 'gqa'\)"),
])
def test_model_asks_the_variant_for_bias_and_gqa_at_load(overrides, reason, monkeypatch):
  basic = registry.AttentionVariant("basic", registry.get("dot_product").fn,
                                    frozenset({"causal", "segment_ids", "positions", "decode"}))
  monkeypatch.setitem(registry._REGISTRY, "basic", basic)
  load(**{"model.attention": "basic"})  # fine without them ...
  with pytest.raises(ValueError, match=reason):
    load(**{"model.attention": "basic"}, **overrides)


# ---------------------------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("kv_heads", [HEADS, 2, 1])
def test_grouped_query_attention_shrinks_key_value_params_and_cache(kv_heads):
  layers = {"model.num_encoder_layers": 2, "model.num_decoder_layers": 2}
  model = models.build(load(**layers, **{"model.num_kv_heads": kv_heads}))
  x = jnp.ones((2, 5), jnp.int32)
  params = nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(0), x, x))["params"]
  head_dim = 32 // HEADS
  for block in (params["encoder"]["layer_0"]["self_attention"], params["decoder"]["layer_1"]["cross_attention"]):
    assert block["query"]["kernel"].shape == (32, HEADS, head_dim)
    assert block["key"]["kernel"].shape == block["value"]["kernel"].shape == (32, kv_heads, head_dim)
    assert block["value"]["bias"].shape == (kv_heads, head_dim) and "bias" not in block["key"]
  standard = nn.meta.unbox(jax.eval_shape(models.build(load(**layers)).init, jax.random.PRNGKey(0), x, x))["params"]
  count = lambda tree: sum(leaf.size for leaf in jax.tree.leaves(tree))
  blocks = 2 + 2 * 2  # encoder self-attention, decoder self- and cross-attention.
  # key kernel + value kernel and bias (keys have no bias).
  assert count(standard) - count(params) == blocks * (32 + 32 + 1) * (HEADS - kv_heads) * head_dim
  encoded = jnp.zeros((2, 5, 32))
  cache = jax.eval_shape(functools.partial(model.init, decode=True, method=model.decode), jax.random.PRNGKey(0),
                         encoded, x, jnp.zeros((2, 7), jnp.int32))["cache"]
  assert cache["decoder"]["layer_0"]["self_attention"]["cached_key"].shape == (2, kv_heads, 7, head_dim)


@pytest.mark.parametrize("option, table", [("relative", True), ("alibi", False)])
def test_bias_positions_add_no_embedding_and_share_one_table_per_stack(option, table):
  two_layers = models.build(load(**{"model.positional": option, "model.num_encoder_layers": 2,
                                    "model.num_decoder_layers": 2}))
  params = nn.meta.unbox(jax.eval_shape(two_layers.init, jax.random.PRNGKey(0), *source_and_target()))["params"]
  for stack in ("encoder", "decoder"):
    assert "positions" not in params[stack]
    assert ("position_bias" in params[stack]) == table
    assert all("position_bias" not in layer for name, layer in params[stack].items() if name.startswith("layer_"))
  if table:
    assert params["encoder"]["position_bias"]["relative_embedding"].shape == (32, HEADS)
  model, variables = model_and_params(option, HEADS)
  x = source_and_target()[0][:2]
  perm = np.array([3, 0, 5, 1, 4, 2, 7, 6])
  encoded = model.apply(variables, x, method=model.encode)
  assert np.abs(np.asarray(model.apply(variables, x[:, perm], method=model.encode) - encoded[:, perm])).max() > 1e-3


def test_grouped_query_attention_is_multi_head_attention_with_shared_key_value_heads():
  """Query head h uses key/value head h // (H / G): repeating the G-head key/value projections to H heads
  gives a standard multi-head model with the same output."""
  grouped, variables = model_and_params("rotary", 2)
  standard, _ = model_and_params("rotary", HEADS)
  shared = lambda path, leaf: (jnp.repeat(leaf, HEADS // 2, axis=-2)
                               if any(getattr(p, "key", None) in ("key", "value") for p in path) else leaf)
  widened = jax.tree_util.tree_map_with_path(shared, variables)
  assert widened["params"]["decoder"]["layer_0"]["cross_attention"]["value"]["kernel"].shape == (32, HEADS, 8)
  x, y = source_and_target()
  np.testing.assert_allclose(standard.apply(widened, x, y), grouped.apply(variables, x, y), atol=1e-5)


# ---------------------------------------------------------------------------------------------- invariances


@pytest.mark.parametrize("kv_heads", KV_HEADS)
@pytest.mark.parametrize("option", POSITIONAL)
def test_decoder_is_causal(option, kv_heads):
  """Row 0 as is; rows 1 and 2 with target token 0, resp. 3, changed: logits up to it stay, later ones move."""
  model, variables = model_and_params(option, kv_heads)
  x, y = source_and_target()
  x, y = jnp.tile(x[:1], (3, 1)), jnp.tile(y[:1], (3, 1))
  changed = y.at[1, 0].set(y[1, 0] % 49 + 1).at[2, 3].set(y[2, 3] % 49 + 1)
  logits = model.apply(variables, x, changed)
  for row, j in ((1, 0), (2, 3)):
    np.testing.assert_allclose(logits[row, :j + 1], logits[0, :j + 1], atol=1e-5)
    assert np.abs(np.asarray(logits[row, j + 1:] - logits[0, j + 1:])).max() > 1e-4


@pytest.mark.parametrize("kv_heads", KV_HEADS)
@pytest.mark.parametrize("option", POSITIONAL)
def test_cached_decoding_equals_full_forward(option, kv_heads):
  model, variables = model_and_params(option, kv_heads)
  x, y = source_and_target()
  full = model.apply(variables, x, y)
  encoded = model.apply(variables, x, method=model.encode)
  np.testing.assert_allclose(decode_step_by_step(model, variables["params"], encoded, x, y), full, atol=1e-4)


@pytest.mark.parametrize("kv_heads", KV_HEADS)
@pytest.mark.parametrize("option", POSITIONAL)
def test_packed_rows_equal_separate_padded_examples(option, kv_heads):
  """Row 0 packs examples a and b; rows 1 and 2 hold a and b alone, padded: one call, three rows."""
  model, variables = model_and_params(option, kv_heads)
  xa, ya, xb, yb = tokens(0, (3,)), tokens(1, (4,)), tokens(2, (4,)), tokens(3, (2,))
  pad = lambda v, n: jnp.pad(v, (0, n - v.shape[0]))
  inputs = jnp.stack([jnp.concatenate([xa, xb, jnp.zeros(1, jnp.int32)]), pad(xa, 8), pad(xb, 8)])
  targets = jnp.stack([jnp.concatenate([ya, yb]), pad(ya, 6), pad(yb, 6)])
  logits = model.apply(
      variables, inputs, targets,
      inputs_segmentation=jnp.array([[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0]]),
      targets_segmentation=jnp.array([[1, 1, 1, 1, 2, 2], [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]]),
      inputs_positions=jnp.array([[0, 1, 2, 0, 1, 2, 3, 0], list(range(8)), list(range(8))]),
      targets_positions=jnp.array([[0, 1, 2, 3, 0, 1], list(range(6)), list(range(6))]))
  np.testing.assert_allclose(logits[0, :4], logits[1, :4], atol=1e-5)
  np.testing.assert_allclose(logits[0, 4:], logits[2, :2], atol=1e-5)


@pytest.mark.parametrize("kv_heads", KV_HEADS)
@pytest.mark.parametrize("option", POSITIONAL)
def test_source_padding_invariance(option, kv_heads):
  model, variables = model_and_params(option, kv_heads)
  short, y = tokens(0, (3, 5)), source_and_target()[1]
  np.testing.assert_allclose(model.apply(variables, jnp.pad(short, ((0, 0), (0, 3))), y),
                             model.apply(variables, short, y), atol=1e-5)
