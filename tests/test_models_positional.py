"""Every registered positional encoding (`positional.available()`, with its `example_options`) x key/value head
count through the model's invariances (causality, cache, packing, padding); where its parameters live; what the
config asks of the attention variant. The pure functions: test_ops_positional.py; the registry and encodings
registered by a test: test_positional.py.

The default run takes each encoding with one key/value head count (ENCODING_X_KV_HEADS), the slow run all of them.
The model checks run eagerly: for models this small an eager apply (~0.1 s once the op cache is warm) is
cheaper than compiling each of the 18 configurations.
"""

import dataclasses
import functools
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import decode_step_by_step, positional_overrides
from jformer import config as config_lib
from jformer import positional, tasks
from jformer.attention import registry

ENCODINGS = positional.available()
HEADS = 4
KV_HEADS = [HEADS, 2, 1]
# Every encoding x key/value head count in the slow run; in the default run each encoding with one count, the
# counts taken in turn (2, 1, 4, 2, ...: grouped for alibi, relative and rotary, whose biases and rotations are per
# head).
ENCODING_X_KV_HEADS = [
    pytest.param(name, kv_heads, marks=() if kv_heads == [2, 1, HEADS][index % 3] else pytest.mark.slow)
    for index, name in enumerate(ENCODINGS) for kv_heads in KV_HEADS]
DEMO = pathlib.Path(__file__).resolve().parents[1] / "configs" / "small.py"


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
def model_and_params(name, kv_heads):
  model = tasks.build_model(load(**positional_overrides(name), **{"model.num_kv_heads": kv_heads}))
  return model, nn.meta.unbox(model.init(jax.random.PRNGKey(0), *source_and_target()))


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize("kv_heads, reason", [(3, "num_kv_heads=3 does not divide num_heads=4"),
                                              (-1, "model.num_kv_heads=-1 must be at least 0")])
def test_key_value_heads_that_do_not_divide_the_heads_fail_at_load(kv_heads, reason):
  with pytest.raises(ValueError, match=reason):
    load(**{"model.num_kv_heads": kv_heads})


@pytest.fixture
def basic_variant(scratch_registries):
  """'basic': an attention variant with neither bias nor gqa, registered for one test. (`register` always adds
  gqa, repeating key/value heads; without it the model must still ask, as a plug-in may build its own entry.)"""
  registry.REGISTRY.add("basic", dataclasses.replace(registry.get("dot_product"), name="basic", supports=frozenset(
      {"causal", "segment_ids", "positions", "decode"})))


@pytest.mark.parametrize("name", ENCODINGS)
def test_model_asks_the_variant_for_bias_exactly_when_the_encoding_acts_as_one(name, basic_variant):
  overrides = {"model.attention": "basic", **positional_overrides(name)}
  if positional.get(name).acts != "bias":
    load(**overrides)
    return
  with pytest.raises(ValueError, match=rf"'basic' does not support 'bias' for model.positional='{name}'"):
    load(**overrides)


def test_model_asks_the_variant_for_gqa_at_load(basic_variant):
  load(**{"model.attention": "basic"})  # fine without it ...
  with pytest.raises(ValueError, match=r"'basic' does not support 'gqa' for model.num_kv_heads=2"):
    load(**{"model.attention": "basic", "model.num_kv_heads": 2})


# ---------------------------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("kv_heads", [HEADS, 2, 1])
def test_grouped_query_attention_shrinks_key_value_params_and_cache(kv_heads):
  layers = {"model.num_encoder_layers": 2, "model.num_decoder_layers": 2}
  model = tasks.build_model(load(**layers, **{"model.num_kv_heads": kv_heads}))
  x = jnp.ones((2, 5), jnp.int32)
  params = nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(0), x, x))["params"]
  head_dim = 32 // HEADS
  for block in (params["encoder"]["layer_0"]["self_attention"], params["decoder"]["layer_1"]["cross_attention"]):
    assert block["query"]["kernel"].shape == (32, HEADS, head_dim)
    assert block["key"]["kernel"].shape == block["value"]["kernel"].shape == (32, kv_heads, head_dim)
    assert block["value"]["bias"].shape == (kv_heads, head_dim) and "bias" not in block["key"]
  standard = nn.meta.unbox(jax.eval_shape(tasks.build_model(load(**layers)).init, jax.random.PRNGKey(0), x, x))["params"]
  count = lambda tree: sum(leaf.size for leaf in jax.tree.leaves(tree))
  blocks = 2 + 2 * 2  # encoder self-attention, decoder self- and cross-attention.
  # key kernel + value kernel and bias (keys have no bias).
  assert count(standard) - count(params) == blocks * (32 + 32 + 1) * (HEADS - kv_heads) * head_dim
  encoded = jnp.zeros((2, 5, 32))
  cache = jax.eval_shape(functools.partial(model.init, decode=True, method=model.decode), jax.random.PRNGKey(0),
                         encoded, x, jnp.zeros((2, 7), jnp.int32))["cache"]
  assert cache["decoder"]["layer_0"]["self_attention"]["cached_key"].shape == (2, kv_heads, 7, head_dim)


@pytest.mark.parametrize("name", ENCODINGS)
def test_declared_params_live_where_the_encoding_acts(name):
  """An encoding's parameters, with their declared shapes: in each stack's `positions` module when it acts on
  embeddings, in its `position_bias` module (one per stack, shared by the layers) when it biases logits, in
  every self-attention when it rotates; nowhere else, and no such module when it does not act there."""
  encoding = positional.get(name)
  model = tasks.build_model(load(**positional_overrides(name), **{"model.num_encoder_layers": 2,
                                                             "model.num_decoder_layers": 2}))
  params = nn.meta.unbox(jax.eval_shape(model.init, jax.random.PRNGKey(0), *source_and_target()))["params"]
  dims = {**model.config.dims, **encoding.with_defaults(encoding.example_options)}
  declared = {param: spec.resolve(dims) for param, spec in encoding.params.items()}
  shapes = lambda tree: {param: leaf.shape for param, leaf in tree.items()}
  holder = {"embedding": "positions", "bias": "position_bias"}.get(encoding.acts)
  for stack in ("encoder", "decoder"):
    for module in ("positions", "position_bias"):
      assert shapes(params[stack].get(module, {})) == (declared if module == holder else {}), (stack, module)
    for layer in ("layer_0", "layer_1"):
      attention = params[stack][layer]["self_attention"]
      rotary = {param: leaf for param, leaf in attention.items() if param not in ("query", "key", "value", "out")}
      assert shapes(rotary) == (declared if encoding.acts == "rotary" else {})
      assert "position_bias" not in params[stack][layer]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.integration) if n in ("alibi", "learned") else n
                                  for n in ENCODINGS])  # alibi and learned (11-12 s each) in the integration tier.
def test_encoder_is_permutation_equivariant_only_without_positions(name):
  model, variables = model_and_params(name, HEADS)
  x = source_and_target()[0][:2]
  perm = np.array([3, 0, 5, 1, 4, 2, 7, 6])
  encoded = model.apply(variables, x, method=model.encode)
  moved = np.abs(np.asarray(model.apply(variables, x[:, perm], method=model.encode) - encoded[:, perm])).max()
  assert (moved < 1e-5) if positional.get(name).acts == "none" else (moved > 1e-3)


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


@pytest.mark.parametrize("name, kv_heads", ENCODING_X_KV_HEADS)
def test_decoder_is_causal(name, kv_heads):
  """Row 0 as is; rows 1 and 2 with target token 0, resp. 3, changed: logits up to it stay, later ones move."""
  model, variables = model_and_params(name, kv_heads)
  x, y = source_and_target()
  x, y = jnp.tile(x[:1], (3, 1)), jnp.tile(y[:1], (3, 1))
  changed = y.at[1, 0].set(y[1, 0] % 49 + 1).at[2, 3].set(y[2, 3] % 49 + 1)
  logits = model.apply(variables, x, changed)
  for row, j in ((1, 0), (2, 3)):
    np.testing.assert_allclose(logits[row, :j + 1], logits[0, :j + 1], atol=1e-5)
    assert np.abs(np.asarray(logits[row, j + 1:] - logits[0, j + 1:])).max() > 1e-4


@pytest.mark.parametrize("name, kv_heads", ENCODING_X_KV_HEADS)
def test_cached_decoding_equals_full_forward(name, kv_heads):
  model, variables = model_and_params(name, kv_heads)
  x, y = source_and_target()
  full = model.apply(variables, x, y)
  encoded = model.apply(variables, x, method=model.encode)
  np.testing.assert_allclose(decode_step_by_step(model, variables["params"], encoded, x, y), full, atol=1e-4)


@pytest.mark.parametrize("name, kv_heads", ENCODING_X_KV_HEADS)
def test_packed_rows_equal_separate_padded_examples(name, kv_heads):
  """Row 0 packs examples a and b; rows 1 and 2 hold a and b alone, padded: one call, three rows."""
  model, variables = model_and_params(name, kv_heads)
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


@pytest.mark.parametrize("name, kv_heads", ENCODING_X_KV_HEADS)
def test_source_padding_invariance(name, kv_heads):
  model, variables = model_and_params(name, kv_heads)
  short, y = tokens(0, (3, 5)), source_and_target()[1]
  np.testing.assert_allclose(model.apply(variables, jnp.pad(short, ((0, 0), (0, 3))), y),
                             model.apply(variables, short, y), atol=1e-5)
