"""Attention surgery and transfer (`train.attention_transfer`, `jformer/train/transfer.py`): the transfer loss is
the per-layer mean squared error of the new attention's output against the model's own on the same input; during
transfer only the new variant's parameters move, afterwards those `train.trainable` names; what cannot transfer is
refused in one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from test_block_options import perturbed
from jformer import config as config_lib
from jformer.models import LanguageModel, TransformerConfig
from jformer.models.layers import MultiHeadAttention, norm
from jformer.train import transfer
from jformer.train.state import TrainState
from jformer.train.step import make_train_step

FIELDS = dict(architecture="lm", vocab_size=20, d_model=8, num_heads=2, d_ff=16, num_decoder_layers=2, norm="pre",
              normalization="rmsnorm", activation="swiglu", positional="rotary", use_bias=False, dropout_rate=0.0,
              attention="dot_product")
KINDS = {"linear": {"attention": "hedgehog", "attention_options": {"chunk_size": 4}}, "global": {}}
TARGETS = jnp.array([[3, 5, 7, 2, 9, 1, 0, 0], [4, 4, 8, 6, 1, 11, 12, 1]])


def converted(pattern=("linear", "global")):
  return LanguageModel(TransformerConfig.from_config({**FIELDS, "layer_kinds": KINDS, "layer_pattern": pattern}))


@pytest.mark.slow  # a model and its layers applied, or a train step compiled: seconds.
def test_transfer_loss_is_the_mean_squared_error_of_each_replaced_layer_against_the_teacher():
  """One replaced layer (layer 0, hedgehog) under a softmax one: the loss is mean over real tokens and features of
  (MHA_hedgehog(n) - MHA_softmax(n))^2, n = the first norm of the embedded, shifted input; both attentions share
  the layer's projections."""
  model = converted()
  params = perturbed(model.init(jax.random.PRNGKey(0), TARGETS)["params"])
  got = transfer.transfer_loss(model, params, {"targets": TARGETS})
  cfg = model.config
  layer = params["decoder"]["layer_0"]
  shifted = jnp.pad(TARGETS, ((0, 0), (1, 0)))[:, :-1]
  x = jnp.take(params["embedding"]["embedding"], shifted, axis=0) * np.sqrt(cfg.d_model)
  normed = norm(cfg, "n").apply({"params": layer["self_attention_norm"]}, x)
  segments = (TARGETS != 0).astype(jnp.int32)
  call = dict(q_segment_ids=segments, kv_segment_ids=segments)
  student = MultiHeadAttention(cfg.kind_configs["linear"], causal=True, rotary=True).apply(
      {"params": layer["self_attention"]}, normed, **call)
  teacher_params = {k: v for k, v in layer["self_attention"].items() if k != "hedgehog"}
  teacher = MultiHeadAttention(cfg, causal=True, rotary=True).apply({"params": teacher_params}, normed, **call)
  real = segments[..., None]
  want = jnp.sum(jnp.square(student - teacher) * real) / (jnp.sum(real) * cfg.d_model)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert set(layer["self_attention"]["hedgehog"]) == {"query_map", "key_map"}


@pytest.mark.slow  # a model and its layers applied, or a train step compiled: seconds.
def test_only_the_new_variant_trains_during_transfer_then_what_trainable_names():
  model = converted()
  config = config_lib.load(config_lib.files.pathlib.Path(__file__).parents[1] / "configs" / "small.py", {
      **{f"model.{k}": v for k, v in FIELDS.items()}, "model.layer_kinds": KINDS,
      "model.layer_pattern": ("linear", "global"), "train.attention_transfer": 2,
      "train.trainable": ".*self_attention.*",
      "train.label_smoothing": 0.0, "optimizer.warmup_steps": 1})
  tx, schedule = transfer.run_optimizer(config_lib.run_settings(config), 10)
  params = perturbed(model.init(jax.random.PRNGKey(0), TARGETS)["params"])
  state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                     rng=jax.random.PRNGKey(1), skipped_updates=jnp.zeros((), jnp.int32))
  step = jax.jit(make_train_step(model, tx, schedule, label_smoothing=0.0, attention_transfer=2))
  flat = lambda p: traverse_util.flatten_dict(jax.device_get(p), sep="/")
  losses = []
  for _ in range(2):
    before = flat(state.params)
    state, metrics = step(state, {"targets": TARGETS})
    losses.append(float(metrics["loss"]))
    moved = {path for path, value in flat(state.params).items() if not np.array_equal(value, before[path])}
    assert moved == {"decoder/layer_0/self_attention/hedgehog/query_map",
                     "decoder/layer_0/self_attention/hedgehog/key_map"}
    assert float(metrics["accuracy"]) == 0.0
  assert losses[1] < losses[0]
  before = flat(state.params)
  state, metrics = step(state, {"targets": TARGETS})  # step 3: the language-model loss, attention only.
  moved = {path for path, value in flat(state.params).items() if not np.array_equal(value, before[path])}
  assert moved and all("self_attention" in path for path in moved)
  assert any("layer_1/self_attention/query" in path for path in moved)
  assert float(metrics["loss"]) > 2.0 > 10 * losses[0], (metrics["loss"], losses)  # ~ln(20): cross-entropy now.


@pytest.mark.parametrize("overrides, message", [
    ({"model.layer_kinds": {"a": {"attention": "linear"}}, "model.layer_pattern": ("a",)},
     "and ['linear'] own none: use one that learns"),
    ({}, "train.attention_transfer needs layers whose kind replaces the model's attention"),
])
def test_what_cannot_transfer_is_refused(repo_root, overrides, message):
  with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
    config_lib.load(repo_root / "configs" / "small.py", {"model.architecture": "lm", "train.attention_transfer": 5,
                                                         **overrides})
