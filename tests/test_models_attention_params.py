"""Attention variants that learn parameters, inside the model: created from their declaration, sharded by their
logical axes, trained by the gradient, cached decoding equal to the full forward.

Their math is checked against their explicit formulas in tests/test_attention_variants.py; this file checks the
plumbing, for every registered variant that declares parameters (a new one is covered without editing here).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import decode_step_by_step, init, tiny, tokens
from jformer import attention

LEARNED = [name for name in attention.available() if attention.get(name).params]
# Gradients and cached decoding through the model: `general` in the default run (the cheapest to compile), every
# learned variant in the slow run (their math against their formulas: test_attention_variants.py, by default too).
THROUGH_THE_MODEL = [pytest.param(name, marks=() if name == "general" else pytest.mark.slow) for name in LEARNED]


def model_with(name, **overrides):
  options = {f"model.attention_options.{k}": v for k, v in attention.get(name).example_options.items()}
  return tiny(**{"model.attention": name, "model.norm": "pre", **options, **overrides})


def test_the_similarity_variants_learn_parameters():
  assert {"additive", "general", "cosine"} <= set(LEARNED)


@pytest.mark.parametrize("name", LEARNED)
def test_declared_parameters_are_created_with_shapes_and_logical_axes(name):
  model = model_with(name)
  x, y = tokens(0, (2, 6)), tokens(1, (2, 5))
  boxed = jax.eval_shape(model.init, jax.random.PRNGKey(0), x, y)["params"]  # shapes and axes: nothing to compute.
  variant, cfg = attention.get(name), model.config
  shapes = variant.param_shapes(cfg.dims, dict(cfg.attention_options))
  for stack, block in (("encoder", "self_attention"), ("decoder", "self_attention"), ("decoder", "cross_attention")):
    created = boxed[stack]["layer_1"][block][name]
    assert set(created) == set(variant.params)
    for param, spec in variant.params.items():
      assert created[param].value.shape == shapes[param]
      assert created[param].names == spec.logical_axes()
  first = sorted(variant.params)[0]  # layer 0 names its axes too (per head: "heads", which tensor parallelism splits)
  assert boxed["encoder"]["layer_0"]["self_attention"][name][first].names == variant.params[first].logical_axes()


@pytest.mark.parametrize("name", THROUGH_THE_MODEL)
def test_parameters_get_gradients_and_cached_decoding_equals_full_forward(name):
  """Compiled: these variants loop over blocks, which an eager call would compile anew at every call. One layer per
  stack (the layers are alike; the shapes and axes of a second layer are checked above)."""
  model = model_with(name, **{"model.num_encoder_layers": 1, "model.num_decoder_layers": 1})
  x, y = tokens(0, (2, 6)).at[1, 4:].set(0), tokens(1, (2, 5))
  params = init(model, x, y)["params"]
  loss = lambda p: jnp.sum(model.apply({"params": p}, x, y) ** 2)
  grads = jax.jit(jax.grad(loss))(params)
  for stack, block in (("encoder", "self_attention"), ("decoder", "cross_attention")):
    for param, grad in grads[stack]["layer_0"][block][name].items():
      assert np.abs(np.asarray(grad)).max() > 0, f"{stack}/{block}/{param} gets no gradient"
  full = jax.jit(model.apply)({"params": params}, x, y)
  encoded = jax.jit(functools.partial(model.apply, method=model.encode))({"params": params}, x)
  np.testing.assert_allclose(decode_step_by_step(model, params, encoded, x, y, jit=True), full, atol=1e-4)
