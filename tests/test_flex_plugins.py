"""The flex plug-ins from papers (tests/plugins/) inside the model, from the command line and through the report
card: the Forgetting Transformer's forget gate (a captured tensor the model computes from the layer input, summed
along the sequence and kept as a running sum while decoding) and ALiBi with a learned slope per head. Their
attention math against their formulas: tests/test_attention_flex.py."""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_decode_generate import check_cached_generation_equals_full_forward, lm_and_params

from helpers import REPO, check_packed_rows_equal_separate_examples, decode_step_by_step, init, tiny, tokens
from jformer import attention, checkpoint
from jformer import config as config_lib
from jformer import report_card as rc
from jformer.report_card import suite as suite_lib

PLUGINS = {"forgetting_transformer": "tests/plugins/forgetting_transformer.py",
           "learned_alibi": "tests/plugins/learned_alibi.py"}
# What each learns: FoX's gate (reached through its capture), the slopes.
LEARNED = {"forgetting_transformer": ("forget_weight", "forget_bias"), "learned_alibi": ("log_slope",)}


def model_with(name, **overrides):
  return tiny(**{"model.attention": name, "model.norm": "pre", "model.positional": "none",
                 "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, **overrides})


@pytest.mark.slow  # the default run decodes FoX in a language model (below); its gradients: test_attention_flex.py
@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_flex_plugin_learns_in_every_attention_and_decodes_with_the_cache_as_the_full_forward(flex_plugins, name):
  """Encoder self-, decoder self- and cross-attention each get a gradient for the plug-in's parameters; decoding
  one token per cached step (FoX: its running sum of log forget gates, its keys' sums in the cache) gives the full
  forward's logits."""
  model = model_with(name)
  x, y = tokens(0, (2, 6)).at[1, 4:].set(0), tokens(1, (2, 5))
  params = init(model, x, y)["params"]
  grads = jax.jit(jax.grad(lambda p: jnp.sum(model.apply({"params": p}, x, y) ** 2)))(params)
  for stack, block in (("encoder", "self_attention"), ("decoder", "self_attention"), ("decoder", "cross_attention")):
    for param in LEARNED[name]:
      assert np.abs(np.asarray(grads[stack]["layer_0"][block][name][param])).max() > 0, (stack, block, param)
  full = jax.jit(model.apply)({"params": params}, x, y)
  encoded = jax.jit(functools.partial(model.apply, method=model.encode))({"params": params}, x)
  np.testing.assert_allclose(decode_step_by_step(model, params, encoded, x, y, jit=True), full, atol=1e-4)


# Through a whole model: the integration tier (the mods' own decoding and packing: test_attention_flex.py, by default).
@pytest.mark.parametrize("name", [pytest.param("forgetting_transformer", marks=pytest.mark.integration),
                                  pytest.param("learned_alibi", marks=pytest.mark.slow)])
def test_flex_plugin_in_a_layer_pattern_generates_from_the_cache_as_the_full_forward(flex_plugins, name):
  """A language model alternating the plug-in's layers with softmax layers (`model.layer_kinds`): the prompt fed at
  once (FoX: its running sum over the prompt), then one token per step, equals the uncached forward pass."""
  kinds = {"flex": {"attention": name}, "softmax": {"attention": "dot_product"}}
  check_cached_generation_equals_full_forward(*lm_and_params(**{
      "model.layer_kinds": kinds, "model.layer_pattern": ("flex", "softmax"), "model.positional": "none"}))


@pytest.mark.integration
def test_forgetting_transformer_packed_rows_equal_separate_examples(flex_plugins):
  """A language model's packed row (two documents and padding, positions restarting at 0) gives each document's
  logits alone: the capture's sum over the whole row differs from each document's own by a constant inside it."""
  model = tiny(**{"model.attention": "forgetting_transformer", "model.architecture": "lm", "model.positional": "none",
                  "model.num_decoder_layers": 1, "model.norm": "pre"})
  a, b = tokens(0, (1, 5)), tokens(1, (1, 3))
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), a))
  apply = jax.jit(model.apply)
  packed = apply(params, jnp.concatenate([a, b, jnp.zeros((1, 2), jnp.int32)], 1),
                 segmentation=jnp.array([[1] * 5 + [2] * 3 + [0] * 2]),
                 positions=jnp.array([[0, 1, 2, 3, 4, 0, 1, 2, 0, 0]]))
  np.testing.assert_allclose(packed[:, :5], apply(params, a), atol=1e-5)
  np.testing.assert_allclose(packed[:, 5:8], apply(params, b), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_flex_plugin_packed_translation_rows_equal_separate_examples(flex_plugins, name):
  """Packed pairs (encoder and decoder rows of two examples each) give each example's logits alone: positions and
  cumulative captures restart at each example, in encoder-decoder attention too."""
  check_packed_rows_equal_separate_examples(model_with(name))


def train_command(workdir, name, **extra):
  overrides = {"imports": PLUGINS[name], "model.attention": name, "model.positional": "none", "train.steps": 4,
               "train.log_every": 2, "train.eval_every": 4, "train.checkpoint_every": 4, "data.batch_size": 8,
               "data.eval_batch_size": 40, **extra}
  return [sys.executable, "-m", "jformer.main", "train", "--config=configs/mqar.py", f"--workdir={workdir}",
          *(f"--config.{key}={value}" for key, value in overrides.items())]


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_flex_plugin_trains_from_the_command_line(tmp_path, name, scratch_registries):  # load_run imports it here.
  """`jformer train --config=configs/mqar.py --config.imports=FILE --config.model.attention=NAME` in a fresh process:
  four steps, and the plug-in's parameters moved from their initial values in both layers."""
  workdir = tmp_path / "run"
  done = subprocess.run(train_command(workdir, name), cwd=REPO, capture_output=True, text=True, timeout=900)
  assert done.returncode == 0, done.stderr[-3000:]
  assert config_lib.load_run(workdir).imports == PLUGINS[name]
  with checkpoint.Checkpointer(str(workdir / "checkpoints"), read_only=True) as ckpt:
    assert ckpt.latest_step() == 4
    params = ckpt.restore_params()
  config = config_lib.load_run(workdir)
  spec = attention.get(name).params[LEARNED[name][-1]]  # a parameter with a fixed initial value (the slopes, b_h)
  initial = spec.init(jax.random.PRNGKey(0), spec.resolve(dict(heads=config.model.num_heads)))
  trained = [leaf for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
             if LEARNED[name][-1] in jax.tree_util.keystr(path)]
  assert len(trained) == config.model.num_decoder_layers
  assert all(np.abs(np.asarray(leaf) - np.asarray(initial)).max() > 0 for leaf in trained)


@pytest.mark.integration
@pytest.mark.parametrize("name, captured_mib", [("forgetting_transformer", 1 / 8), ("learned_alibi", 0.0)])
def test_report_card_grades_a_flex_plugin(tmp_path, repo_root, monkeypatch, scratch_registries, name, captured_mib):
  """`jformer report-card`'s grading takes each flex plug-in as it is (a shortened suite: MQAR for 20 steps, the
  train step at 8 x 32 tokens, the decode step): a figure for every metric; FoX's decode state holds the keys' sums
  of log forget gates beside the keys."""
  monkeypatch.chdir(repo_root)
  full = rc.default_suite()
  short = {"train.steps": 20, "train.eval_every": 20, "train.log_every": 10, "train.checkpoint_every": 20,
           "data.eval_batch_size": 40}
  parts = [dataclasses.replace(full.part("mqar_64x4"), overrides={**full.part("mqar_64x4").overrides, **short}),
           dataclasses.replace(full.part("train_step"), overrides={"data.max_length": 32, "data.batch_size": 8,
                                                                   "model.num_decoder_layers": 1}),
           full.part("decode_step")]
  suite = suite_lib.Suite(tuple(parts), tuple(m for m in full.metrics if m.part in {p.name for p in parts}))
  card = rc.grade({"imports": PLUGINS[name], "model.attention": name}, tmp_path / "card", suite=suite,
                  say=lambda line: None)
  assert card["variant"] == name and set(card["values"]) == {m.name for m in suite.metrics}
  assert 0.0 <= card["values"]["mqar_64x4_accuracy"] <= 1.0 and card["values"]["train_step_ms"] > 0
  # 4 layers x (keys and values: 8 rows x 1,024 positions x 256 float32 = 8 MiB each, + FoX's keys' sums: 8 x 1,024
  # x 4 heads float32 = 1/8 MiB) and its running sums (8 x 4 float32 per layer).
  assert card["values"]["decode_state_mib"] == pytest.approx(4 * (2 * 8 + captured_mib), abs=0.01)
