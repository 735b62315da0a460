"""Scanned layers (model.scan_layers): the looped model's outputs and gradients from its parameters stacked, the
conversion between the two layouts, the looped model's greedy and beam outputs from the scanned model's decode cache
(stacked per layer like the parameters: full, window and recurrent decode states, layer patterns, translation), and
the one-line refusals (a looped checkpoint, a shared bias)."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import init, tiny, tokens
from jformer.checkpoint import Checkpointer, shapes
from jformer.decode import common, generator, translator
from jformer.models import stack_layer_params, summary, unstack_layer_params

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


# Pre-norm with an untied output embedding: small random models whose greedy outputs vary from step to step.
BLOCK = {"model.norm": "pre", "model.tie_output_embedding": False}
LM = {**BLOCK, "model.architecture": "lm", "model.num_kv_heads": 2}
LOCAL_GLOBAL = {"model.layer_kinds": {"local": {"attention": "local", "attention_options": {"window_size": 3}},
                                      "global": {"attention": "dot_product"}},
                "model.layer_pattern": ("local", "global"), "model.num_decoder_layers": 4}


def looped_and_scanned(**overrides):
  """(looped model, its parameters, scanned model, the parameters stacked), without dropout; the embeddings scaled
  up so that greedy outputs vary from step to step (at initialisation they repeat one token)."""
  looped, scanned = tiny(**NO_DROPOUT, **overrides), tiny(**NO_DROPOUT, **overrides, **{"model.scan_layers": True})
  x = tokens(0, (1, 4))
  args = (x, x) if looped.is_encoder_decoder else (x,)
  params = nn.meta.unbox(looped.init(jax.random.PRNGKey(0), *args))["params"]
  params = jax.tree_util.tree_map_with_path(
      lambda path, p: 8.0 * p if "embedding" in jax.tree_util.keystr(path) else p, params)
  return looped, params, scanned, stack_layer_params(params, period=len(looped.config.layer_pattern) or 1)


def decoded(model, params, method):
  """Greedy ids `[2, 8]`, or beam ids `[2, 8]` and scores `[2]` (the best of 3 beams), of a language model's
  continuation of 5-token prompts or of a translation model's output for 7-token sources."""
  source = tokens(3, (2, 7)).at[1, 5:].set(0)
  if model.is_encoder_decoder:
    run = functools.partial(translator.translate_ids, model, max_decode_len=8, method=method, beam_size=3)
  else:
    run = functools.partial(generator.generate_ids, model, max_new_tokens=8, method=method, beam_size=3)
  return jax.jit(run)(params, source[:, :5] if not model.is_encoder_decoder else source)


@pytest.mark.integration  # a few seconds of compiling each (four searches).
@pytest.mark.parametrize("overrides", [
    pytest.param(LM, id="lm-full"),
    pytest.param({**LM, **LOCAL_GLOBAL}, id="lm-pattern-window-full"),
    pytest.param({**LM, "model.attention": "linear"}, id="lm-recurrent"),
    pytest.param({**LM, "model.positional": "rotary"}, id="lm-rotary"),
    pytest.param(BLOCK, id="translation"),
    pytest.param({**BLOCK, **LOCAL_GLOBAL, "model.num_encoder_layers": 4}, id="translation-pattern")])
def test_a_scanned_model_decodes_the_looped_models_outputs(overrides):
  looped, params, scanned, stacked = looped_and_scanned(**overrides)
  want_greedy, got_greedy = decoded(looped, params, "greedy"), decoded(scanned, stacked, "greedy")
  assert len(set(np.asarray(want_greedy[0]).tolist())) >= 3, want_greedy  # not one token repeated: it can fail.
  np.testing.assert_array_equal(got_greedy, want_greedy)
  (want_beam, want_scores), (got_beam, got_scores) = decoded(looped, params, "beam"), decoded(scanned, stacked, "beam")
  np.testing.assert_array_equal(got_beam, want_beam)
  np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5)


def test_a_scanned_models_cache_is_stacked_per_layer_like_its_parameters():
  """The self-attention cache `[layers, B, G, S, K]` under `layers/`, its step counters `[layers]`; the decoders
  find its rows on axis 1 (`decode.common.row_axis`): beam search expands and reorders them there."""
  _, _, scanned, stacked = looped_and_scanned(**LM)
  cache = jax.eval_shape(functools.partial(generator.init_cache, scanned, batch=2, length=12), stacked)
  layers = cache["decoder"]["layers"]["self_attention"]
  assert layers["cached_key"].shape == (2, 2, 2, 12, 8) and layers["position"].shape == (2,)
  assert cache["decoder"]["positions"]["position"].shape == ()
  expanded = jax.eval_shape(lambda c: common.expand_cache(c, 3), cache)
  assert expanded["decoder"]["layers"]["self_attention"]["cached_key"].shape == (2, 6, 2, 12, 8)
  assert expanded["decoder"]["layers"]["self_attention"]["position"].shape == (2,)


@pytest.mark.integration  # two compilations at 1,024 tokens: seconds.
def test_scanned_layers_keep_no_more_temporary_memory_than_looped():
  """The blockwise engine's memory stays linear in the length under the layer scan (the masking inputs' barrier in
  jformer/attention/blockwise.py says how it was lost): 2 layers at 1,024 tokens, the gradient of the training
  loss, scanned 0.95 of looped (2.5 when the scan hoisted the attention masks; benchmarks/scan_memory.py: 4,096
  tokens)."""
  from jformer.models import LanguageModel, TransformerConfig

  x = jnp.ones((1, 1024), jnp.int32)
  temp = {}
  for scan in (False, True):
    config = TransformerConfig(architecture="lm", vocab_size=64, d_model=64, num_heads=4, d_ff=128,
                               num_encoder_layers=0, num_decoder_layers=2, dropout_rate=0.0, max_length=1024,
                               scan_layers=scan)
    model = LanguageModel(config)
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), x))["params"]
    grad = jax.jit(jax.grad(lambda p: model.apply({"params": p}, x, deterministic=False).mean()))
    temp[scan] = grad.lower(params).compile().memory_analysis().temp_size_in_bytes
  assert temp[True] <= 1.1 * temp[False], temp
