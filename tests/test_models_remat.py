"""Rematerialized layers (model.remat): the same loss and gradients, less memory kept for the backward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import init, tiny, tokens
from jformer.models import remat


def loss_and_grads(model, x, y, rng=None):
  """params -> (loss, gradients) of `model` on (x, y), compiled once (called again for other parameters)."""
  def loss(params):
    rngs = None if rng is None else {"dropout": rng}
    logits = model.apply({"params": params}, x, y, deterministic=False, rngs=rngs)
    return jnp.sum(jax.nn.log_softmax(logits)[..., 3] * (y != 0))
  return jax.jit(jax.value_and_grad(loss))


ONE_LAYER = {"model.num_encoder_layers": 1, "model.num_decoder_layers": 1}  # each layer is rematerialized alike.


@pytest.mark.parametrize("norm", ["post", pytest.param("pre", marks=pytest.mark.integration)])
def test_full_remat_gives_the_same_loss_and_gradients(norm):
  x, y = tokens(0, (2, 9)).at[1, 6:].set(0), tokens(1, (2, 7)).at[0, 5:].set(0)
  plain = tiny(**{"model.dropout_rate": 0.0, "model.norm": norm, "model.remat": "none", **ONE_LAYER})
  rematerialized = tiny(**{"model.dropout_rate": 0.0, "model.norm": norm, "model.remat": "full", **ONE_LAYER})
  params = init(plain, x, y)["params"]
  (want_loss, want), (got_loss, got) = loss_and_grads(plain, x, y)(params), loss_and_grads(rematerialized, x, y)(params)
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_dropout_in_the_recomputation_matches_the_forward_pass():
  """The backward pass recomputes with the forward pass's dropout masks: its gradient is the gradient of the loss
  that was computed (checked against a finite difference along the gradient)."""
  x, y = tokens(0, (2, 8)), tokens(1, (2, 8))
  model = tiny(**{"model.dropout_rate": 0.3, "model.remat": "full", **ONE_LAYER})
  params = init(model, x, y)["params"]
  rng = jax.random.PRNGKey(5)
  step = loss_and_grads(model, x, y, rng)
  loss, grads = step(params)
  direction = jax.tree.map(lambda g: g / jnp.sqrt(sum(jnp.sum(l**2) for l in jax.tree.leaves(grads))), grads)
  eps = 1e-2
  shifted = lambda sign: step(jax.tree.map(lambda p, d: p + sign * eps * d, params, direction))[0]
  slope = (shifted(1) - shifted(-1)) / (2 * eps)
  norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grads)))
  np.testing.assert_allclose(slope, norm, rtol=2e-2)


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_remat_keeps_less_memory():
  x, y = tokens(0, (2, 32)), tokens(1, (2, 32))
  temp = {}
  for mode in ("none", "full"):
    model = tiny(**{"model.remat": mode})  # 2 + 2 layers: full keeps ~0.5 of none's temporary memory (4 + 4: ~0.37).
    params = init(model, x, y)["params"]
    grad = jax.jit(jax.grad(lambda p: model.apply({"params": p}, x, y, deterministic=False,
                                                  rngs={"dropout": jax.random.PRNGKey(0)}).sum()))
    temp[mode] = grad.lower(params).compile().memory_analysis().temp_size_in_bytes
  assert temp["full"] < 0.7 * temp["none"], temp


def test_auto_rematerializes_long_sequences_only():
  assert remat.wanted("auto", remat.AUTO_MIN_LENGTH) and not remat.wanted("auto", remat.AUTO_MIN_LENGTH - 1)
  assert remat.wanted("full", 1) and not remat.wanted("none", 10**6)
  assert remat.wanted("dots_saveable", 1) and remat.policy("dots_saveable") is jax.checkpoint_policies.dots_saveable
  assert remat.policy("full") is None and remat.policy("auto") is None


@pytest.mark.parametrize("policy,scan", [  # one case by default, the others in the integration tier.
    ("nothing_saveable", False),
    *(pytest.param(p, s, marks=pytest.mark.integration)
      for p, s in [("dots_saveable", True), ("full", True), ("dots_saveable", False), ("nothing_saveable", True),
                   ("offload_dots", True), ("offload_dots", False)])])
def test_each_remat_policy_gives_the_gradients_of_none(policy, scan):
  """Named policies go through nn.remat (per layer in the loop, the scan body when scanned; looped 'full' is the
  test above); 2 + 2 layers."""
  x, y = tokens(0, (2, 9)).at[1, 6:].set(0), tokens(1, (2, 7)).at[0, 5:].set(0)
  layout = {"model.dropout_rate": 0.0, "model.scan_layers": scan}
  plain, rematerialized = tiny(**layout, **{"model.remat": "none"}), tiny(**layout, **{"model.remat": policy})
  params = init(plain, x, y)["params"]
  (want_loss, want), (got_loss, got) = loss_and_grads(plain, x, y)(params), loss_and_grads(rematerialized, x, y)(params)
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


@pytest.mark.integration  # compiles six programs for seconds each: the integration tier.
def test_scanned_remat_policies_keep_less_memory():
  """In the scanned layout the policies save memory on every backend (2 + 2 layers: nothing_saveable ~0.30 of
  none's temporary memory, dots_saveable ~0.45). In the loop, XLA:CPU merges nn.remat's recomputation with the
  forward pass (models/remat.py): there only 'full' and 'auto' save memory on CPU."""
  x, y = tokens(0, (2, 32)), tokens(1, (2, 32))
  temp = {}
  for mode in ("none", "dots_saveable", "nothing_saveable"):
    model = tiny(**{"model.remat": mode, "model.scan_layers": True})
    params = init(model, x, y)["params"]
    grad = jax.jit(jax.grad(lambda p: model.apply({"params": p}, x, y, deterministic=False,
                                                  rngs={"dropout": jax.random.PRNGKey(0)}).sum()))
    temp[mode] = grad.lower(params).compile().memory_analysis().temp_size_in_bytes
  assert temp["nothing_saveable"] < 0.4 * temp["none"], temp
  assert temp["nothing_saveable"] < temp["dots_saveable"] < 0.6 * temp["none"], temp
