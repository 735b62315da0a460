"""Per-layer patterns (`model.layer_kinds`, `model.layer_pattern`): each layer's self-attention is its kind's variant
and positional encoding; a one-kind pattern is the plain model; windows compose over depth as they should; the
scanned layout (over the pattern's repeats) computes the looped one; cached generation equals the full forward pass
for every decoding variant mixed with softmax layers (the per-layer matrix), for per-kind rotary bases and a per-kind
bias; bad patterns are refused in one line; the shipped configs train and generate from the CLI."""

from __future__ import annotations

import io
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_decode_generate import (DECODING, check_cached_generation_equals_full_forward,
                                  default_or_slow, lm_and_params, lm_config)

from helpers import PLUGIN_NAME, REPO, skip_unless_runs_here
from jformer import attention, models, tasks
from jformer.checkpoint import shapes
from jformer.models import summary
from jformer import config as config_lib

LOCAL_GLOBAL = {"local": {"attention": "local", "attention_options": {"window_size": 3}},
                "global": {"attention": "dot_product"}}


def patterned(kinds, pattern, **overrides) -> dict:
  return {"model.layer_kinds": kinds, "model.layer_pattern": tuple(pattern), **overrides}


def test_layer_config_follows_the_pattern_repeated_over_the_depth():
  config = tasks.build_model(lm_config(**patterned(LOCAL_GLOBAL, ["local"] * 5 + ["global"],
                                                   **{"model.num_decoder_layers": 8}))).config
  kinds = [config.layer_config(i).attention for i in range(8)]
  assert kinds == ["local"] * 5 + ["dot_product"] + ["local"] * 2
  assert dict(config.layer_config(0).attention_options) == {"window_size": 3}
  assert config.layer_config(5).attention_options == () and config.layer_config(0).layer_pattern == ()
  assert [c.attention for c in config.layer_configs()] == ["local", "dot_product"]


def test_a_pattern_of_one_kind_is_the_plain_model():
  tokens = jax.random.randint(jax.random.PRNGKey(0), (2, 9), 2, 50)
  plain, params = lm_and_params(**{"model.attention": "dot_product"})
  kinds = {"only": {"attention": "dot_product"}}
  one_kind, _ = lm_and_params(**patterned(kinds, ["only"], **{"model.attention": "linear"}))
  np.testing.assert_array_equal(one_kind.apply({"params": params}, tokens), plain.apply({"params": params}, tokens))


def changed_positions(model, params, tokens) -> list[int]:
  """The output positions whose logits change when the first token changes."""
  other = tokens.at[:, 0].set(tokens[0, 0] % 40 + 3)
  difference = np.abs(np.asarray(model.apply({"params": params}, tokens) - model.apply({"params": params}, other)))
  return np.flatnonzero(difference.max(axis=(0, 2)) > 1e-6).tolist()


def test_windows_compose_over_depth_and_a_global_layer_sees_everything():
  """Window 3 (keys less than 3 positions back): the first token (position 1, after BOS) reaches 2 positions further
  per local layer, so 2 local layers reach positions 1-5 of 10; local then global reaches all of them."""
  tokens = jax.random.randint(jax.random.PRNGKey(1), (1, 10), 2, 50)
  local, params = lm_and_params(**patterned(LOCAL_GLOBAL, ["local", "local"]))
  assert changed_positions(local, params, tokens) == [1, 2, 3, 4, 5]
  mixed, _ = lm_and_params(**patterned(LOCAL_GLOBAL, ["local", "global"]))  # the same parameters: no variant has any.
  assert changed_positions(mixed, params, tokens) == list(range(1, 10))
  first_global, _ = lm_and_params(**patterned(LOCAL_GLOBAL, ["global", "local"]))
  assert changed_positions(first_global, params, tokens) == list(range(1, 10))


@pytest.mark.parametrize("architecture", ["lm", "transformer"])
@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_scanned_pattern_computes_the_looped_one(architecture):
  """4 layers of pattern (local, global): scanned over its 2 repeats, parameters `layers/layer_{0,1}` stacked [2]."""
  overrides = patterned(LOCAL_GLOBAL, ["local", "global"], **{
      "model.architecture": architecture, "model.num_decoder_layers": 4, "model.num_encoder_layers": 4,
      "model.dropout_rate": 0.0})
  looped = tasks.build_model(lm_config(**overrides))
  scanned = tasks.build_model(lm_config(**{**overrides, "model.scan_layers": True}))
  x = jax.random.randint(jax.random.PRNGKey(2), (2, 7), 2, 50)
  args, _ = looped.call_arguments({"inputs": x, "targets": x})
  params = nn.meta.unbox(looped.init(jax.random.PRNGKey(0), *args))["params"]
  stacked = models.stack_layer_params(params, period=2)
  assert jax.tree.structure(stacked) == jax.tree.structure(
      nn.meta.unbox(scanned.init(jax.random.PRNGKey(0), *args))["params"])
  assert set(stacked["decoder"]["layers"]) == {"layer_0", "layer_1"}
  assert stacked["decoder"]["layers"]["layer_1"]["self_attention"]["query"]["kernel"].shape[0] == 2
  jax.tree.map(np.testing.assert_array_equal, models.unstack_layer_params(stacked), params)
  refused = shapes.difference(shapes.expected(summary.param_shapes(looped)), stacked)  # a scanned checkpoint, looped.
  assert refused.startswith("checkpoint has stacked parameters (decoder/layers/layer_0/") and "unstack" in refused

  def loss(model):
    return lambda p: jnp.sum(jnp.tanh(model.apply({"params": p}, *args)))

  (want, want_grads), (got, got_grads) = (jax.value_and_grad(loss(looped))(params),
                                          jax.value_and_grad(loss(scanned))(stacked))
  np.testing.assert_allclose(got, want, rtol=1e-5)
  jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5),
               models.unstack_layer_params(got_grads), want_grads)


@pytest.mark.parametrize("name", default_or_slow(DECODING, ("local",)))  # the others in the slow run.
def test_cached_generation_equals_full_forward_for_each_variant_beside_softmax_layers(name):
  variant = attention.get(name)
  skip_unless_runs_here(variant)
  kinds = {"variant": {"attention": name, "attention_options": dict(variant.example_options)},
           "softmax": {"attention": "dot_product"}}
  check_cached_generation_equals_full_forward(*lm_and_params(**patterned(kinds, ["variant", "softmax"])))


def test_cached_generation_of_a_plugin_variant_in_a_pattern(plugin_registry):
  kinds = {"plugin": {"attention": PLUGIN_NAME}, "softmax": {"attention": "dot_product"}}
  check_cached_generation_equals_full_forward(*lm_and_params(**patterned(kinds, ["softmax", "plugin"])))


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_each_kind_keeps_its_rotary_base():
  """Gemma 3's two rotary bases: the model differs from one with a single base, and decodes exactly."""
  rotary = {"model.positional": "rotary"}
  two = {"local": {"attention": "local", "attention_options": {"window_size": 3}, "positional_options": {"base": 10.0}},
         "global": {"attention": "dot_product", "positional_options": {"base": 10_000.0}}}
  model, params = lm_and_params(**patterned(two, ["local", "global"], **rotary))
  assert [dict(c.positional_options)["base"] for c in model.config.layer_configs()] == [10.0, 10_000.0]
  check_cached_generation_equals_full_forward(model, params)
  one = {kind: {**values, "positional_options": {"base": 10_000.0}} for kind, values in two.items()}
  same_base, _ = lm_and_params(**patterned(one, ["local", "global"], **rotary))
  tokens = jax.random.randint(jax.random.PRNGKey(3), (1, 9), 2, 50)
  assert not np.allclose(model.apply({"params": params}, tokens), same_base.apply({"params": params}, tokens))


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_a_kind_with_its_own_bias_encoding_gets_its_own_shared_bias():
  kinds = {"relative": {"attention": "dot_product", "positional": "relative"}, "rotary": {"attention": "dot_product"}}
  model, params = lm_and_params(**patterned(kinds, ["relative", "rotary", "relative"], **{
      "model.positional": "rotary", "model.num_decoder_layers": 3}))
  assert "position_bias_relative" in params["decoder"] and "position_bias" not in params["decoder"]
  check_cached_generation_equals_full_forward(model, params)


@pytest.mark.parametrize("overrides, message", [
    (patterned(LOCAL_GLOBAL, ["local", "glob"]),
     r"model.layer_pattern names \['glob'\], which model.layer_kinds does not define \(it defines \['global', "
     r"'local'\]\)"),
    ({"model.layer_kinds": LOCAL_GLOBAL},
     r"model.layer_kinds defines \['global', 'local'\] but model.layer_pattern is empty: name the kinds in order"),
    (patterned({"a": {"attention": "dot_product", "window_size": 3}}, ["a"]),
     r"model.layer_kinds.a sets \['window_size'\]; a layer kind sets only \['attention', 'attention_options', "
     r"'positional', 'positional_options'\]"),
    (patterned({"a": {"attention": "dot_prodct"}}, ["a"]),
     r"layer kind 'a' \(model.layer_kinds.a\): .*'dot_prodct'.*dot_product"),
    (patterned({"a": {"positional": "learned"}}, ["a"]),
     r"model.layer_kinds.a.positional='learned' adds to the embeddings, once per stack, not per layer"),
    (patterned({"a": {"attention": "local", "attention_options": {"window": 3}}}, ["a"]),
     r"layer kind 'a' \(model.layer_kinds.a\): .*window"),
    (patterned(LOCAL_GLOBAL, ["local", "local", "global"], **{"model.scan_layers": True}),
     r"scan_layers=True scans whole repeats of model.layer_pattern \(3 layers\), but num_decoder_layers=2 is not a "
     r"multiple of 3"),
])
def test_bad_patterns_are_refused_in_one_line(overrides, message):
  with pytest.raises(ValueError, match=message) as error:
    lm_config(**overrides)
  assert "\n" not in str(error.value)


def test_a_kind_whose_variant_cannot_decode_is_named_when_decoding(scratch_registries):
  model, _ = lm_and_params(**patterned({"a": {"attention": "dot_product"}, "b": {"attention": "dot_product"}},
                                       ["a", "b"]))
  assert model.config.attention_refusal(decoding=True) is None

  @attention.register("train_only", supports={"causal", "segment_ids"}, weights=attention.softmax_weights)
  def train_only(query, key, value, **masking):  # a variant that trains (on any backend) but cannot decode.
    return attention.get("dot_product").fn(query, key, value, **masking)

  config = lm_config(**patterned({"a": {"attention": "dot_product"}, "b": {"attention": "train_only"}}, ["a", "b"]))
  refusal = tasks.build_model(config).config.attention_refusal(decoding=True)
  assert refusal.startswith("layer kind 'b' (model.layer_kinds.b): attention variant 'train_only' does not "
                            "support 'decode'")


@pytest.mark.integration  # two runs trained and decoded from the command line.
@pytest.mark.parametrize("config_file", ["lm_local_global.py", "lm_hybrid.py"])
def test_shipped_pattern_configs_train_and_generate_from_the_cli(config_file, text_corpus, tmp_path, monkeypatch,
                                                                 capsys):
  from jformer import main

  workdir = tmp_path / "run"
  small = {"data.path": text_corpus, "data.data_dir": text_corpus.parent / "tfds", "data.max_length": 16,
           "data.batch_size": 8, "data.eval_batch_size": 8, "model.vocab_size": 400, "model.d_model": 32,
           "model.num_heads": 2, "model.d_ff": 64, "model.max_length": 32, "optimizer.warmup_steps": 10,
           "train.steps": 6, "train.budget_minutes": 0, "train.log_every": 3, "train.eval_every": 6,
           "train.checkpoint_every": 6, "train.eval_lengths": "(8, 32)"}  # 6 steps, not the LM demo's 10 minutes.
  if config_file == "lm_local_global.py":
    small["model.layer_kinds.local.attention_options.window_size"] = 4
  main.main(["train", f"--config={REPO / 'configs' / config_file}", f"--workdir={workdir}",
             *(f"--config.{key}={value}" for key, value in small.items())])
  out = capsys.readouterr().out
  assert "step      6/6 |" in out and "test bits per byte" in out, out[-2000:]
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"The file\n"), encoding="utf-8"))
  main.main(["generate", f"--workdir={workdir}", "--method=greedy", "--max_new_tokens=5"])
  generated = capsys.readouterr().out.splitlines()
  assert len(generated) == 1 and generated[0], generated  # one continuation of the prompt line (6 steps: noise).
  config = config_lib.load(REPO / "configs" / config_file)  # the shipped config itself, unshrunk.
  assert config.model.num_decoder_layers == 6 and len(config.model.layer_pattern) in (3, 6)


def test_pattern_sweep_expands_to_each_pattern_and_the_hybrid_with_two_seeds(repo_root, monkeypatch):
  from launch import sweep

  monkeypatch.chdir(repo_root)
  patterns = sweep.load("configs/sweeps/lm_patterns.py")
  assert len(patterns.points) == 10 and patterns.base == "configs/lm_local_global.py"
  layouts = [tuple(p.overrides["model.layer_pattern"]) for p in patterns.points[::2]]
  assert layouts == [("global",), ("local", "global"), ("local",) * 3 + ("global",), ("local",) * 5 + ("global",),
                     ("linear", "linear", "global")]
  hybrid = config_lib.load(repo_root / patterns.base, {k: sweep.cli_value(v) for k, v in {
      **patterns.fixed, **patterns.points[-1].overrides}.items()})
  assert set(hybrid.model.layer_kinds) == {"linear", "global"} and hybrid.model.num_decoder_layers == 6


@pytest.mark.integration  # six models' shapes traced (about 20 s).
def test_pattern_sweep_record_names_rows_and_sizes_their_decode_caches(repo_root, monkeypatch, tmp_path):
  """The record's rows are the patterns' names, and its decode-cache column is what each layer keeps: at 4,096
  positions a global layer every key and value (2 x 4096 x d_model float32 = 8 MiB), a local one 128 of them,
  a linear one its fixed state."""
  import runpy

  from launch import sweep

  monkeypatch.chdir(repo_root)
  monkeypatch.syspath_prepend(str(repo_root / "benchmarks"))
  import record_sweep

  patterns = sweep.load("configs/sweeps/lm_patterns.py")
  row_of = runpy.run_path("configs/sweeps/lm_patterns.py")["row_of"]
  cache = {}
  for point in patterns.points[::2]:
    block = {k: v for k, v in point.overrides.items() if not record_sweep.is_seed(k)}
    workdir = tmp_path / point.name
    workdir.mkdir()
    config_lib.write_run(config_lib.load(repo_root / patterns.base, {k: sweep.cli_value(v) for k, v in {
        **patterns.fixed, **point.overrides}.items()}), workdir)
    cache[row_of(block)] = record_sweep.decode_cache_mib(str(workdir), 4096)
  assert list(cache) == ["all global", "1:1", "3:1", "5:1", "hybrid (linear, linear, softmax)"]
  full, window = 2 * 4096 * 256 * 4 / 2**20, 2 * 128 * 256 * 4 / 2**20  # MiB per layer (d_model 256, float32)
  assert cache["all global"] == pytest.approx(6 * full, rel=1e-3)
  assert cache["1:1"] == pytest.approx(3 * full + 3 * window, rel=1e-3)
  assert cache["3:1"] == pytest.approx(full + 5 * window, rel=1e-3)  # local x 3, global, local x 2: one global
  assert cache["5:1"] == pytest.approx(full + 5 * window, rel=1e-3)
  assert 2 * full < cache["hybrid (linear, linear, softmax)"] < 2 * full + 4 * window
