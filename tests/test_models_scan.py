"""Scanned layers (model.scan_layers): the looped model's outputs and gradients from its parameters stacked, the
conversion between the two layouts, and the one-line refusals (a looped checkpoint, decoding, a shared bias)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import init, tiny, tokens
from jformer.checkpoint import Checkpointer, shapes
from jformer.models import stack_layer_params, summary, unstack_layer_params
from jformer.models.config import SCAN_DECODE_REFUSAL

NO_DROPOUT = {"model.dropout_rate": 0.0}


def loss_and_grads(model, args):
  """params -> (loss, gradients) of a token's log-probability summed over the targets."""
  def loss(params):
    logits = model.apply({"params": params}, *args, deterministic=False)
    return jnp.sum(jax.nn.log_softmax(logits)[..., 3] * (args[-1] != 0))
  return jax.jit(jax.value_and_grad(loss))


def test_stack_and_unstack_are_exact_inverses():
  model = tiny(**NO_DROPOUT)
  params = init(model, tokens(0, (1, 4)), tokens(1, (1, 4)))["params"]
  stacked = stack_layer_params(params)
  assert "layer_0" not in stacked["encoder"] and "layer_1" not in stacked["decoder"]
  np.testing.assert_array_equal(stacked["decoder"]["layers"]["feed_forward"]["wi"]["kernel"][1],
                                params["decoder"]["layer_1"]["feed_forward"]["wi"]["kernel"])
  assert stacked["encoder"]["layers"]["self_attention"]["query"]["kernel"].shape == (2, 32, 4, 8)
  back = unstack_layer_params(stacked)
  assert jax.tree.structure(back) == jax.tree.structure(params)
  for got, want in zip(jax.tree.leaves(back), jax.tree.leaves(params)):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("architecture,norm,dtype,tolerance", [
    # seconds of compiling: integration tier (the scanned patterns too: test_layer_patterns.py).
    pytest.param("transformer", "post", "float32", 1e-5, marks=pytest.mark.integration),
    pytest.param("lm", "pre", "float32", 1e-5, marks=pytest.mark.integration),
    # bfloat16: the residual stream keeps the embeddings' dtype through the post-norm, as a scan's carry must.
    pytest.param("transformer", "post", "bfloat16", 5e-2, marks=pytest.mark.integration)])
def test_scanned_model_gives_the_looped_outputs_and_gradients(architecture, norm, dtype, tolerance):
  overrides = {**NO_DROPOUT, "model.architecture": architecture, "model.norm": norm, "model.dtype": dtype}
  looped, scanned = tiny(**overrides), tiny(**overrides, **{"model.scan_layers": True})
  x, y = tokens(0, (2, 9)).at[1, 6:].set(0), tokens(1, (2, 7)).at[0, 5:].set(0)
  args = (x, y) if architecture == "transformer" else (y,)
  params = nn.meta.unbox(looped.init(jax.random.PRNGKey(0), *args))["params"]
  stacked = stack_layer_params(params)
  shape = lambda tree: jax.tree.map(jnp.shape, tree)
  assert shape(nn.meta.unbox(summary.param_shapes(scanned))) == shape(stacked)
  np.testing.assert_allclose(scanned.apply({"params": stacked}, *args), looped.apply({"params": params}, *args),
                             atol=tolerance)
  (want_loss, want), (got_loss, got) = loss_and_grads(looped, args)(params), loss_and_grads(scanned, args)(stacked)
  np.testing.assert_allclose(got_loss, want_loss, rtol=tolerance / 10)
  for g, w in zip(jax.tree.leaves(unstack_layer_params(got)), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, rtol=10 * tolerance, atol=tolerance)


def test_a_looped_checkpoint_is_refused_by_a_scanned_model_naming_the_conversion():
  looped, scanned = tiny(), tiny(**{"model.scan_layers": True})
  looped_params, scanned_params = summary.param_shapes(looped), summary.param_shapes(scanned)
  problem = shapes.difference(shapes.expected(scanned_params), nn.meta.unbox(looped_params))
  assert problem == ("checkpoint has per-layer parameters (decoder/layer_0/cross_attention/key/kernel) but "
                     "model.scan_layers=True expects stacked ones (decoder/layers/cross_attention/key/kernel): "
                     "convert with jformer.models.stack_layer_params (period=len(model.layer_pattern) with a "
                     "pattern), or set model.scan_layers=False")
  back = shapes.difference(shapes.expected(looped_params), nn.meta.unbox(scanned_params))
  assert back.startswith("checkpoint has stacked parameters (decoder/layers/") and "unstack_layer_params" in back
  converted = stack_layer_params(jax.tree.map(jnp.zeros_like, nn.meta.unbox(looped_params)))
  assert shapes.difference(shapes.expected(scanned_params), converted) is None


def test_scanned_stacked_axis_is_replicated():
  names = shapes.expected(summary.param_shapes(tiny(**{"model.scan_layers": True})))
  shape, axes = names["encoder/layers/feed_forward/wi/kernel"]
  assert shape == (2, 32, 64) and axes == (None, "embed", "mlp")


def test_decoding_a_scanned_model_is_refused_in_one_line():
  model = tiny(**{"model.scan_layers": True})
  x, y = tokens(0, (1, 4)), tokens(1, (1, 1))
  with pytest.raises(ValueError) as refused:
    model.init(jax.random.PRNGKey(0), jnp.ones((1, 4, 32)), x, y, decode=True, method=model.decode)
  assert refused.value.args[0] == ("model.scan_layers=True does not decode yet (the decode cache is per layer): decode "
                                   "with model.scan_layers=False and the parameters converted by "
                                   "jformer.models.unstack_layer_params")


def test_scan_with_a_shared_bias_encoding_is_refused():
  with pytest.raises(ValueError, match="scan_layers=True cannot scan layers that share model.positional='alibi'"):
    tiny(**{"model.scan_layers": True, "model.positional": "alibi"})


def test_restoring_a_looped_checkpoint_into_a_scanned_model_is_refused_in_one_line(tmp_path):
  looped, scanned = tiny(), tiny(**{"model.scan_layers": True})
  params = init(looped, tokens(0, (1, 4)), tokens(1, (1, 4)))["params"]
  state = {"params": params, "step": jnp.zeros((), jnp.int32)}
  with Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
    assert ckpt.save(1, state)
    with pytest.raises(ValueError) as refused:
      ckpt.restore({"params": stack_layer_params(params), "step": state["step"]}, step=1,
                   params=shapes.expected(summary.param_shapes(scanned)))
    message = refused.value.args[0]
    assert "\n" not in message and message.startswith(f"checkpoint 1 in {tmp_path} does not fit this model: "
                                                      "checkpoint has per-layer parameters (decoder/layer_0/")
    assert "convert with jformer.models.stack_layer_params (period=" in message
    converted = ckpt.restore(state, step=1, params=shapes.expected(summary.param_shapes(looped)))
  np.testing.assert_array_equal(stack_layer_params(converted["params"])["encoder"]["layers"]["feed_forward"]["wo"]
                                ["kernel"][1], params["encoder"]["layer_1"]["feed_forward"]["wo"]["kernel"])


def test_the_decoders_refuse_a_scanned_model_before_decoding():
  config = tiny(**{"model.scan_layers": True}).config
  assert config.attention_refusal(decoding=True) == SCAN_DECODE_REFUSAL and config.attention_refusal() is None
