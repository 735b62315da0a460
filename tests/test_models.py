"""The Transformer's invariances: causality, padding, permutation, caching, packing; every config runs."""

import dataclasses
import functools
import inspect
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import (check_packed_rows_equal_separate_examples, decode_step_by_step, init, positional_overrides,
                     tiny, tokens)
from jformer import config as config_lib
from jformer import attention, positional, tasks
from jformer.attention import auto
from jformer.attention.registry import MASKING
from jformer.decode.translator import init_cache

CONFIGS = sorted(p.name for p in (pathlib.Path(__file__).resolve().parents[1] / "configs").glob("*.py"))


def source_and_target():
  """The `[2, 6]` sources and `[2, 5]` targets most tests share: the models run eagerly, and JAX compiles each op
  for each new shape (seconds for a model), then reuses it."""
  return tokens(0, (2, 6)), tokens(1, (2, 5))


# Every encoding but alibi (10 s) with pre-norm in the default run (every encoding with post-norm, the default, is
# checked by test_models_positional.py's test_decoder_is_causal); every encoding with each norm in the slow run.
@pytest.mark.parametrize("name, norm", [
    pytest.param(name, norm, marks=() if norm == "pre" and name != "alibi" else pytest.mark.slow)
    for norm in ("post", "pre") for name in positional.available()])
def test_decoder_is_causal(norm, name):
  """Target token j changed, for each j: logits up to j stay, later ones move. One call: the 7 changed copies of the
  2 rows after the rows as they are (rows do not see each other)."""
  model = tiny(**{"model.norm": norm, **positional_overrides(name)})
  x, y = tokens(0, (2, 6)), tokens(1, (2, 7))
  params = init(model, x, y)
  changed_at = [y.at[:, j].set(y[:, j] % 49 + 1) for j in range(7)]
  logits = model.apply(params, jnp.tile(x, (8, 1)), jnp.concatenate([y] + changed_at)).reshape(8, 2, 7, -1)
  base = logits[0]
  for j in range(7):
    changed = logits[j + 1]
    np.testing.assert_allclose(changed[:, :j + 1], base[:, :j + 1], atol=1e-5)  # logits <= j: unchanged.
    if j < 6:
      assert np.abs(np.asarray(changed[:, j + 1:] - base[:, j + 1:])).max() > 1e-4


def test_causality_by_gradient():
  """d logits[:, i] / d (embedding of target token j) is zero for j >= i: target j feeds decoder input j+1."""
  model = tiny(**{"model.share_embeddings": False, "model.tie_output_embedding": False})
  x = tokens(0, (1, 5))
  y = jnp.array([[11, 12, 13, 14, 15, 16]])  # distinct tokens, so each embedding row is one position.
  params = init(model, x, y)
  embed = params["params"]["target_embedding"]["embedding"]

  def logits_sums(delta):  # [6]: the sum of the logits at each position.
    perturbed = {"params": dict(params["params"], target_embedding={"embedding": embed + delta})}
    return model.apply(perturbed, x, y)[0].sum(-1)

  grads = np.asarray(jax.jit(jax.jacrev(logits_sums))(jnp.zeros_like(embed)))  # [6, V, D]: row i: d sum i.
  for i in range(6):
    grad = grads[i]
    for j in range(6):
      influence = np.abs(grad[int(y[0, j])]).max()
      if j >= i:
        assert influence == 0.0, (i, j)
      else:
        assert influence > 0.0, (i, j)


@pytest.mark.integration  # each encoding's case runs in the default run: test_models_positional.py.
def test_source_padding_invariance():
  model = tiny()
  x, y = source_and_target()
  params = init(model, x, y)
  base = model.apply(params, x, y)
  padded = jnp.pad(x, ((0, 0), (0, 4)))
  np.testing.assert_allclose(model.apply(params, padded, y), base, atol=1e-5)


def test_target_padding_does_not_change_real_positions():
  model = tiny()
  x, y = source_and_target()
  params = init(model, x, y)
  base = model.apply(params, x, y)
  np.testing.assert_allclose(model.apply(params, x, jnp.pad(y, ((0, 0), (0, 3))))[:, :5], base, atol=1e-5)


def test_encoder_without_positions_is_permutation_equivariant():
  model = tiny(**{"model.positional": "none"})
  x, y = source_and_target()
  params = init(model, x, y)
  perm = np.array([3, 0, 5, 1, 4, 2])
  enc = model.apply(params, x, method=model.encode)
  np.testing.assert_allclose(model.apply(params, x[:, perm], method=model.encode), enc[:, perm], atol=1e-5)
  # ... and the decoder output does not depend on source order at all.
  np.testing.assert_allclose(model.apply(params, x[:, perm], y), model.apply(params, x, y), atol=1e-5)


def test_encoder_with_positions_is_not_permutation_equivariant():
  model = tiny()
  x, y = source_and_target()
  params = init(model, x, y)
  perm = np.array([3, 0, 5, 1, 4, 2])
  enc = model.apply(params, x, method=model.encode)
  assert np.abs(np.asarray(model.apply(params, x[:, perm], method=model.encode) - enc[:, perm])).max() > 1e-3


# With pre-norm: rotary in the default run, alibi (the other encoding that acts inside attention) in the integration
# tier, every encoding in the slow run (each with post-norm, the default, in the default run:
# test_models_positional.py).
@pytest.mark.parametrize("name", [pytest.param(name, marks=() if name == "rotary" else pytest.mark.integration
                                                if name == "alibi" else pytest.mark.slow)
                                  for name in positional.available()])
def test_cached_decoding_equals_full_forward(name):
  model = tiny(**{"model.norm": "pre", **positional_overrides(name)})
  x, y = source_and_target()
  x = x.at[1, 4:].set(0)
  params = init(model, x, y)
  full = model.apply(params, x, y)
  encoded = model.apply(params, x, method=model.encode)
  np.testing.assert_allclose(decode_step_by_step(model, params["params"], encoded, x, y), full, atol=1e-4)


def test_decoding_projects_the_encoder_output_once():
  """Encoder-decoder keys/values are projected when the cache is created; decode steps read them from the cache."""
  model = tiny()
  x, y = source_and_target()
  params = init(model, x, y)["params"]
  encoded = model.apply({"params": params}, x, method=model.encode)
  cache = init_cache(model, params, encoded, x, y.shape[1])
  cross = cache["decoder"]["layer_0"]["cross_attention"]
  key_kernel = params["decoder"]["layer_0"]["cross_attention"]["key"]["kernel"]
  np.testing.assert_allclose(cross["cross_key"], jnp.einsum("bsd,dgk->bgsk", encoded, key_kernel), atol=1e-5)
  run = lambda encoded_at_steps: decode_step_by_step(model, params, encoded, x, y, encoded_at_steps)
  np.testing.assert_array_equal(run(jnp.zeros_like(encoded)), run(encoded))
  np.testing.assert_allclose(run(encoded), model.apply({"params": params}, x, y), atol=1e-4)


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_packed_rows_equal_separate_examples():
  check_packed_rows_equal_separate_examples(tiny(**{"model.positional": "rotary"}))


def test_dropout_is_active_only_when_not_deterministic():
  model = tiny()
  x, y = source_and_target()
  params = init(model, x, y)
  a = model.apply(params, x, y, deterministic=False, rngs={"dropout": jax.random.PRNGKey(1)})
  b = model.apply(params, x, y, deterministic=False, rngs={"dropout": jax.random.PRNGKey(2)})
  assert np.abs(np.asarray(a - b)).max() > 1e-3
  np.testing.assert_array_equal(model.apply(params, x, y), model.apply(params, x, y))


def test_embedding_sharing_options_change_parameters():
  x = tokens(0, (1, 3))
  shared = jax.eval_shape(lambda: init(tiny(), x, x))["params"]
  separate = jax.eval_shape(
      lambda: init(tiny(**{"model.share_embeddings": False, "model.tie_output_embedding": False}), x, x))["params"]
  assert "shared_embedding" in shared and "output_embedding" not in shared["decoder"]
  assert {"source_embedding", "target_embedding"} <= set(separate) and "output_embedding" in separate["decoder"]


def test_sequence_longer_than_max_length_is_an_error():
  model = tiny()
  with pytest.raises(ValueError, match="exceeds model.max_length=32"):
    init(model, tokens(0, (1, 40)), tokens(1, (1, 3)))


def test_language_model_is_causal():
  model = tiny(**{"model.architecture": "lm"})
  y = tokens(1, (2, 7))
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), y))
  assert "cross_attention" not in params["params"]["decoder"]["layer_0"]
  base = model.apply(params, y)
  changed = model.apply(params, y.at[:, 3].set(y[:, 3] % 49 + 1))
  np.testing.assert_allclose(changed[:, :4], base[:, :4], atol=1e-5)
  assert np.abs(np.asarray(changed[:, 4:] - base[:, 4:])).max() > 1e-4


@pytest.mark.parametrize("architecture, args, kwargs", [
    ("transformer", ("inputs", "targets"), {
        "inputs_positions": "inputs_position", "targets_positions": "targets_position",
        "inputs_segmentation": "inputs_segmentation", "targets_segmentation": "targets_segmentation"}),
    ("lm", ("targets",), {"positions": "targets_position", "segmentation": "targets_segmentation"}),
])
def test_model_maps_a_packed_batch_to_its_teacher_forced_call(architecture, args, kwargs):
  model = tiny(**{"model.architecture": architecture})
  batch = {key: key for key in ("inputs", "targets", "inputs_position", "targets_position", "inputs_segmentation",
                                "targets_segmentation")}  # names stand in for the arrays.
  assert model.call_arguments(batch) == (args, kwargs)
  inspect.signature(type(model).__call__).bind(model, *args, **kwargs)  # the arguments exist.
  assert model.call_arguments({"inputs": "inputs", "targets": "targets"}) == (args, {})
  assert model.is_encoder_decoder == (architecture == "transformer")


# The default run builds a translation and a language-model config (small, lm_demo); the slow run every config.
@pytest.mark.parametrize("config_file", [
    pytest.param(name, marks=() if name in ("small.py", "lm_demo.py") else pytest.mark.slow)
    for name in CONFIGS])
def test_every_config_builds_and_runs_forward(config_file, repo_root):
  config = config_lib.load(repo_root / "configs" / config_file)
  model = tasks.build_model(config)
  x = jnp.ones((1, 8), jnp.int32)
  args, _ = model.call_arguments({"inputs": x, "targets": x})  # an LM reads the targets alone.
  params = jax.jit(model.init)(jax.random.PRNGKey(0), *args)
  logits = jax.jit(model.apply)(params, *args)
  assert logits.shape == (1, 8, config.model.vocab_size)
  assert np.isfinite(np.asarray(logits)).all()



@pytest.fixture
def recorded_calls(scratch_registries):
  """'recording': dot_product that records each call's (causal, T, S, masking arguments given)."""
  calls = []
  reference = attention.get("dot_product")

  def fn(query, key, value, **kwargs):
    masking = {k: v for k, v in kwargs.items() if k in MASKING and v is not None}
    calls.append((masking.pop("causal"), query.shape[1], key.shape[1], masking))
    return reference.fn(query, key, value, **kwargs)

  attention.REGISTRY.add("recording", dataclasses.replace(reference, name="recording", fn=fn))
  return calls


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_packed_self_attention_masks_by_index_so_the_kernels_take_it(recorded_calls):
  """Packed training calls attention without positions (rotary still rotates by them: the packed rows equal the
  examples alone), so `auto` on a TPU picks splash for the causal self-attention; decode steps mask by position."""
  model = tiny(**{"model.positional": "rotary", "model.attention": "recording"})
  xa, ya, xb, yb = tokens(0, (1, 3)), tokens(1, (1, 4)), tokens(2, (1, 4)), tokens(3, (1, 2))
  params = init(model, xa, ya)
  recorded_calls.clear()
  apply = jax.jit(model.apply)  # shapes used once: compiled rather than run eagerly (traced once, as eagerly).
  packed = apply(
      params, jnp.concatenate([xa, xb, jnp.zeros((1, 1), jnp.int32)], 1), jnp.concatenate([ya, yb], 1),
      inputs_segmentation=jnp.array([[1, 1, 1, 2, 2, 2, 2, 0]]), targets_segmentation=jnp.array([[1] * 4 + [2] * 2]),
      inputs_positions=jnp.array([[0, 1, 2, 0, 1, 2, 3, 0]]), targets_positions=jnp.array([[0, 1, 2, 3, 0, 1]]))
  # Two layers each: encoder self-attention, decoder self-attention (causal), cross-attention; none with positions.
  assert sorted((causal, t, s, sorted(masking)) for causal, t, s, masking in recorded_calls) == (
      [(False, 6, 8, ["kv_segment_ids", "q_segment_ids"])] * 2 + [(False, 8, 8, ["kv_segment_ids", "q_segment_ids"])]
      * 2 + [(True, 6, 6, ["kv_segment_ids", "q_segment_ids"])] * 2)
  query = jax.ShapeDtypeStruct((1, 6, 4, 8), jnp.float32)
  assert {auto.choose(query, query, backend="tpu", causal=True, **masking).kernel
          for causal, _, _, masking in recorded_calls if causal} == {"splash"}
  np.testing.assert_allclose(packed[:, :4], apply(params, xa, ya), atol=1e-5)
  np.testing.assert_allclose(packed[:, 4:], apply(params, xb, yb), atol=1e-5)
  encoded = jax.jit(functools.partial(model.apply, method=model.encode))(params, xa)
  recorded_calls.clear()
  decode_step_by_step(model, params["params"], encoded, xa, ya[:, :2])
  steps = [(t, s, sorted(masking)) for causal, t, s, masking in recorded_calls if causal]
  # Shaping the cache (init, T=2), then 2 steps of T=1 against its 2 slots; 2 layers each.
  assert steps == [(2, 2, ["kv_positions", "q_positions"])] * 2 + [(1, 2, ["kv_positions", "q_positions"])] * 4


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_packed_language_model_calls_attention_without_positions(recorded_calls):
  model = tiny(**{"model.positional": "rotary", "model.attention": "recording", "model.architecture": "lm"})
  ya, yb = tokens(1, (1, 4)), tokens(3, (1, 2))
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), ya))
  recorded_calls.clear()
  packed = model.apply(params, jnp.concatenate([ya, yb], 1), segmentation=jnp.array([[1] * 4 + [2] * 2]),
                       positions=jnp.array([[0, 1, 2, 3, 0, 1]]))
  assert [(causal, t, sorted(masking)) for causal, t, _, masking in recorded_calls] == (
      [(True, 6, ["kv_segment_ids", "q_segment_ids"])] * 2)
  apply = jax.jit(model.apply)  # shapes used once: compiled rather than run eagerly.
  np.testing.assert_allclose(packed[:, :4], apply(params, ya), atol=1e-5)
  np.testing.assert_allclose(packed[:, 4:], apply(params, yb), atol=1e-5)
