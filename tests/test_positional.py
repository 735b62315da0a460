"""The positional-encoding registry: lookup, signature and option checks, config refusals, every encoding's
function against the contract of its kind, and encodings registered by a test (one of each kind, each with a
learned parameter) running through the model with nothing else edited.

Every encoding through the model's invariances: test_models_positional.py.
"""

import functools
import math
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import decode_step_by_step
from jformer import config as config_lib
from jformer import positional, tasks
from jformer.ops import positional as positional_ops
from jformer.registry import Param, constant, init_params

DEMO = pathlib.Path(__file__).resolve().parents[1] / "configs" / "small.py"
DIMS = dict(d_model=32, heads=4, kv_heads=2, head_dim=8, max_length=16)


def load(**overrides):
  base = {"model.vocab_size": 50, "model.d_model": 32, "model.num_heads": 4, "model.d_ff": 64,
          "model.num_encoder_layers": 1, "model.num_decoder_layers": 2, "model.max_length": 32,
          "data.max_length": 32, "model.dropout_rate": 0.0}
  base.update(overrides)
  return config_lib.load(DEMO, base)


# ---------------------------------------------------------------------------------------------- registry


def test_unknown_encoding_lists_known_ones():
  with pytest.raises(KeyError, match=r"unknown positional encoding 'fourier'; known: \['alibi', 'learned', 'none', "
                                     r"'relative', 'rotary', 'sinusoidal'\]"):
    positional.get("fourier")
  with pytest.raises(ValueError, match=r"unknown positional encoding 'fourier'; known: \['alibi', "):
    load(**{"model.positional": "fourier"})


def test_how_the_built_in_encodings_act():
  acts = {name: positional.get(name).acts for name in positional.available()}
  assert acts == {"sinusoidal": "embedding", "learned": "embedding", "rotary": "rotary", "alibi": "bias",
                  "relative": "bias", "none": "none"}
  assert positional.get("relative").options == {"num_buckets": 32, "max_distance": 128}
  assert positional.get("none").fn is None


@pytest.mark.parametrize("overrides, reason", [
    ({"model.positional_options.num_buckets": 64}, r"positional encoding 'sinusoidal' has no option\(s\) "
                                                   r"\['num_buckets'\]; its options are \['base', 'layout'\]"),
    ({"model.positional": "learned", "model.positional_options.base": 10.0}, r"its options are none"),
    ({"model.positional": "relative", "model.positional_options.num_buckets": 2}, "need num_buckets >= 4"),
    ({"model.positional": "relative", "model.positional_options.num_buckets": 40.5},
     r"positional encoding 'relative' needs a positive int num_buckets, got 40.5 "
     r"\(--config.model.positional_options.num_buckets\)"),
    ({"model.positional_options.base": "ten"}, "positional encoding 'sinusoidal' needs a number for base"),
    ({"model.positional_options.layout": "diagonal"}, r"model.positional_options.layout='diagonal' is not one of "
                                                      r"\['interleaved', 'halves'\]"),
    ({"model.positional": "relative", "model.positional_options.max_distance": 16}, "and max_distance > "
                                                                                    "num_buckets / 2"),
    ({"model.d_model": 33, "model.num_heads": 3}, "sinusoidal positions need an even d_model"),
    ({"model.positional": "rotary", "model.d_model": 36}, r"rotary positions need an even head_dim .*got 9; "
                                                           r"change model.d_model"),
])
def test_bad_options_and_combinations_fail_at_load(overrides, reason):
  with pytest.raises(ValueError, match=reason):
    load(**overrides)


def test_options_are_set_from_the_command_line():
  config = config_lib.load(DEMO, {"model.positional": "relative", "model.positional_options.num_buckets": "64"})
  assert config.model.positional_options.num_buckets == 64
  assert tasks.build_model(config).config.positional_options == (("num_buckets", 64),)


def test_register_refuses_a_wrong_signature_and_bad_declarations(scratch_registries):
  with pytest.raises(ValueError, match="acts='logits' is not one of"):
    positional.register("other", acts="logits")(lambda positions, *, dims, params: positions)
  with pytest.raises(ValueError, match=r"acts 'bias', so its function takes \(q_positions, kv_positions, \*, causal, "
                                       r"dims, params, <options>\)"):
    positional.register("other", acts="bias")(lambda q_positions, kv_positions, *, dims, params: 0.0)
  with pytest.raises(ValueError, match=r"option\(s\) \['scale'\] need a default"):
    positional.register("other", acts="embedding")(lambda positions, *, dims, params, scale: positions)
  with pytest.raises(ValueError, match=r"example_options \['scale'\] are not among its options \['base'\]"):
    positional.register("other", acts="embedding", example_options={"scale": 2.0})(
        lambda positions, *, dims, params, base=1.0: positions)
  with pytest.raises(ValueError, match="acts 'none' and so has nothing to learn"):
    positional.register("other", acts="none", params={"w": Param((1,), constant(0.0))})(lambda: None)
  with pytest.raises(ValueError, match=r"positional encoding 'rotary' is registered twice: at jformer/positional/"
                                       r"rotary.py:\d+ and at tests/test_positional.py:\d+; rename one of them"):
    positional.register("rotary", acts="rotary")(positional.get("rotary").fn)


# ---------------------------------------------------------------------------------------------- the contract


def call(encoding, dims, rng=jax.random.PRNGKey(0)):
  """The encoding's function on small inputs, as the model calls it, with its example options."""
  options = dict(encoding.example_options)
  params = init_params(encoding.params, {**dims, **encoding.with_defaults(options)}, rng)
  arguments = dict(dims=dims, params=params, **options)
  q_positions, kv_positions = jnp.array([[0, 1, 2, 0, 1]]), jnp.arange(7)[None]
  if encoding.acts == "embedding":
    return encoding.fn(q_positions, **arguments)
  if encoding.acts == "rotary":
    return encoding.fn(jax.random.normal(rng, (2, 5, dims["kv_heads"], dims["head_dim"])), q_positions, **arguments)
  return encoding.fn(q_positions, kv_positions, causal=True, **arguments)


@pytest.mark.parametrize("name", [name for name in positional.available() if positional.get(name).acts != "none"])
def test_every_encoding_keeps_the_contract_of_its_kind(name):
  """Shapes and dtypes by kind (jformer/positional/__init__.py), the same under jit."""
  encoding = positional.get(name)
  encoding.check(DIMS, encoding.example_options)
  out = call(encoding, DIMS)
  expected = {"embedding": (1, 5, DIMS["d_model"]), "rotary": (2, 5, DIMS["kv_heads"], DIMS["head_dim"]),
              "bias": (1, DIMS["heads"], 5, 7)}[encoding.acts]
  assert out.shape == expected and out.dtype == jnp.float32 and bool(jnp.isfinite(out).all())
  np.testing.assert_allclose(jax.jit(lambda: call(encoding, DIMS))(), out, atol=1e-6)


# ---------------------------------------------------------------------------------------------- new encodings


def register_toys():
  """One encoding of each kind registered the way a file of `jformer/positional/` would, each with one learned
  parameter initialised so that it starts as the built-in encoding it extends (its twin)."""

  @positional.register("scaled_sinusoidal", acts="embedding", params={"scale": Param((), constant(1.0))})
  def scaled_sinusoidal(positions, *, dims, params, base: float = 10000.0):
    """Sinusoids times a learned scalar."""
    return params["scale"] * positional.get("sinusoidal").fn(positions, dims=dims, params={}, base=base)

  @positional.register("learned_base_rotary", acts="rotary",
                       params={"log_base": Param((), constant(math.log(10000.0)))})
  def learned_base_rotary(x, positions, *, dims, params):
    """RoPE with a learned base."""
    del dims
    return positional_ops.apply_rotary(x, positions, base=jnp.exp(params["log_base"]))

  alibi_init = lambda key, shape, dtype=jnp.float32: jnp.asarray(positional_ops.alibi_slopes(shape[0]), dtype)

  @positional.register("learned_alibi", acts="bias", params={"slopes": Param(("heads",), alibi_init)})
  def learned_alibi(q_positions, kv_positions, *, causal, dims, params):
    """ALiBi with learned slopes."""
    del dims
    return positional_ops.alibi_bias(params["slopes"], q_positions, kv_positions, causal=causal)


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
@pytest.mark.parametrize("toy, twin, where", [
    ("scaled_sinusoidal", "sinusoidal", ("encoder", "positions", "scale")),
    ("learned_base_rotary", "rotary", ("decoder", "layer_1", "self_attention", "log_base")),
    ("learned_alibi", "alibi", ("decoder", "position_bias", "slopes")),
])
def test_an_encoding_registered_elsewhere_runs_through_the_model(toy, twin, where, scratch_registries):
  """Registered outside jformer (no other file edited): it is listed, the config takes it, the model creates its
  parameter where it acts, equals its twin at initialisation, learns (its parameter gets a gradient, the same
  with rematerialized layers), and decodes step by step as it computes teacher-forced."""
  register_toys()
  assert toy in positional.available()
  model, twin_model = (tasks.build_model(load(**{"model.positional": name})) for name in (toy, twin))
  x, y = jax.random.randint(jax.random.PRNGKey(0), (2, 6), 1, 50), jax.random.randint(jax.random.PRNGKey(1), (2, 5),
                                                                                       1, 50)
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), x, y))["params"]
  at = lambda tree: functools.reduce(lambda node, key: node[key], where, tree)
  assert at(params).shape == positional.get(toy).params[where[-1]].resolve(model.config.dims)
  logits = model.apply({"params": params}, x, y)
  twin_params = nn.meta.unbox(twin_model.init(jax.random.PRNGKey(0), x, y))["params"]
  np.testing.assert_allclose(logits, twin_model.apply({"params": twin_params}, x, y), atol=1e-5)

  def gradient(model):
    loss = lambda p: jnp.sum(jax.nn.log_softmax(model.apply({"params": p}, x, y, deterministic=False))[..., 3])
    return at(jax.jit(jax.grad(loss))(params))

  learned = gradient(model)
  assert np.abs(np.asarray(learned)).max() > 0
  rematerialized = tasks.build_model(load(**{"model.positional": toy, "model.remat": "full"}))
  np.testing.assert_allclose(gradient(rematerialized), learned, rtol=1e-4, atol=1e-6)
  encoded = model.apply({"params": params}, x, method=model.encode)
  np.testing.assert_allclose(decode_step_by_step(model, params, encoded, x, y), logits, atol=1e-4)
