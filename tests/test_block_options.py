"""The block options of `config.model` (norm kind, final norm, feed-forward activation, QK-norm, attention and final
logit soft-caps, z-loss, biases), each against its formula written out here in plain jax.numpy; the norm and
activation registries take plug-ins; the default block keeps the paper's parameters, names and counts."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import SMALL, decode_step_by_step, random_qkv, tiny, tokens
from jformer import attention, tasks
from jformer import config as config_lib
from jformer.attention import auto
from jformer.models import TransformerConfig, activations, norms, summary
from jformer.models.layers import FeedForward, MultiHeadAttention
from jformer.ops.linear_cross_entropy import linear_cross_entropy_sums
from jformer.train import optim
from jformer.train.state import init_train_state
from jformer.train.step import make_eval_step, make_train_step

EPS = 1e-6


# ---------------------------------------------------------------------------------------------- formulas


def rms_norm(x, scale):
  return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * scale


def layer_norm(x, scale, bias=0.0):
  mean = jnp.mean(x, axis=-1, keepdims=True)
  variance = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
  return (x - mean) / jnp.sqrt(variance + EPS) * scale + bias


def gelu_tanh(x):
  return 0.5 * x * (1.0 + jnp.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def silu(x):
  return x / (1.0 + jnp.exp(-x))


def cap(x, c):
  return c * jnp.tanh(x / c)


def perturbed(params):
  """Every parameter moved by up to +-0.3 (a fixed pseudo-random pattern, computed on the host: nothing to compile),
  so biases and scales are away from their 0 and 1 starts."""
  leaves, tree = jax.tree.flatten(nn.meta.unbox(params))
  moved = [np.asarray(x) + 0.3 * np.sin(1.7 * np.arange(x.size) + i).reshape(x.shape) for i, x in enumerate(leaves)]
  return jax.tree.unflatten(tree, [x.astype(np.float32) for x in moved])


def leaf_paths(params) -> set[str]:
  return {"/".join(str(getattr(p, "key", p)) for p in path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]}


def normal(seed, shape):
  return jax.random.normal(jax.random.PRNGKey(seed), shape)


def jit_init(module, *args):
  """Unboxed parameters of `module` for these inputs, initialised by one compiled call (cheaper than eagerly)."""
  return nn.meta.unbox(jax.jit(module.init)(jax.random.PRNGKey(0), *args))


# ---------------------------------------------------------------------------------------------- norms


@pytest.mark.parametrize("name, use_bias", [("layernorm", True), ("layernorm", False), ("rmsnorm", True)])
def test_norms_are_their_formulas(name, use_bias):
  x = 3.0 + 2.0 * normal(0, (2, 3, 8))
  module = norms.get(name)(use_bias=use_bias, name=None)
  params = perturbed(module.init(jax.random.PRNGKey(0), x)["params"])
  got = module.apply({"params": params}, x)
  if name == "rmsnorm":
    assert set(params) == {"scale"}  # no bias whatever use_bias says: RMSNorm has none.
    want = rms_norm(x, params["scale"])
  else:
    assert set(params) == ({"scale", "bias"} if use_bias else {"scale"})
    want = layer_norm(x, params["scale"], params["bias"] if use_bias else 0.0)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------- feed-forward

ACTIVATION_FORMULAS = {"relu": lambda x: jnp.maximum(x, 0.0), "gelu": gelu_tanh, "silu": silu, "swiglu": silu,
                       "geglu": gelu_tanh}


@pytest.mark.parametrize("activation, use_bias", [("relu", True), ("gelu", True), ("silu", True), ("swiglu", True),
                                                  ("geglu", True), ("swiglu", False)])
def test_feed_forward_is_its_formula(activation, use_bias):
  """Plain: act(x W1 + b1) W2 + b2 (paper eq. 2); gated: (act(x W0 + b0) * (x W1 + b1)) W2 + b2 (Shazeer 2020)."""
  cfg = TransformerConfig(d_model=8, num_heads=2, d_ff=12, activation=activation, use_bias=use_bias)
  x = normal(1, (2, 3, 8))
  ff = FeedForward(cfg)
  params = perturbed(ff.init(jax.random.PRNGKey(0), x)["params"])
  gated = activation in ("swiglu", "geglu")
  assert set(params) == ({"wi_0", "wi_1", "wo"} if gated else {"wi", "wo"})
  assert all(set(p) == ({"kernel", "bias"} if use_bias else {"kernel"}) for p in params.values())
  dense = lambda h, name: h @ params[name]["kernel"] + (params[name]["bias"] if use_bias else 0.0)
  act = ACTIVATION_FORMULAS[activation]
  h = act(dense(x, "wi_0")) * dense(x, "wi_1") if gated else act(dense(x, "wi"))
  np.testing.assert_allclose(ff.apply({"params": params}, x), dense(h, "wo"), rtol=1e-5, atol=1e-5)


def block_parameters(d_model, d_ff, activation):
  """Parameters of one decoder-only layer (self-attention, feed-forward, their norms), from shapes only."""
  config = config_lib.load(SMALL, {"model.architecture": "lm", "model.d_model": d_model, "model.num_heads": 8,
                                   "model.d_ff": d_ff, "model.activation": activation, "model.vocab_size": 64,
                                   "model.num_decoder_layers": 1})
  return summary.count_by_module(summary.param_shapes(tasks.build_model(config)), depth=3)["decoder/layer_0"]


def test_gated_feed_forward_at_two_thirds_the_width_keeps_the_block_parameter_count():
  d_model = 512
  plain = block_parameters(d_model, 4 * d_model, "relu")
  gated = block_parameters(d_model, round(2 / 3 * 4 * d_model), "swiglu")
  assert abs(gated - plain) / plain < 0.01, (gated, plain)
  assert block_parameters(d_model, 4 * d_model, "swiglu") > 1.3 * plain  # the same d_ff: 3/2 the FFN weights.


# ---------------------------------------------------------------------------------------------- attention


@pytest.mark.parametrize("normalization, use_bias", [("rmsnorm", False), ("layernorm", True)])
def test_attention_with_qk_norm_softcap_and_biases_is_its_formula(normalization, use_bias):
  """softmax(c tanh(norm(x Wq + bq) . norm(x Wk) / sqrt(d) / c)) (x Wv + bv) Wo + bo, causal: norm over head_dim
  with one learned scale (and bias) of head_dim for queries and one for keys."""
  d_model, heads, head_dim, softcap = 16, 2, 8, 2.0
  cfg = TransformerConfig(d_model=d_model, num_heads=heads, attention="dot_product", normalization=normalization,
                          qk_norm=True, attention_logit_softcap=softcap, use_bias=use_bias)
  mha = MultiHeadAttention(cfg, causal=True)
  x = 2.0 * normal(2, (2, 5, d_model))
  params = perturbed(jit_init(mha, x)["params"])
  assert set(params) == {"query", "key", "value", "out", "query_norm", "key_norm"}
  assert params["query_norm"]["scale"].shape == params["key_norm"]["scale"].shape == (head_dim,)
  assert ("bias" in params["query"]) == ("bias" in params["out"]) == use_bias and "bias" not in params["key"]
  norm = rms_norm if normalization == "rmsnorm" else layer_norm

  @jax.jit
  def formula(params, x):
    norm_args = lambda name: (params[name]["scale"],) + ((params[name]["bias"],) if normalization == "layernorm"
                                                          else ())
    project = lambda name: jnp.einsum("bld,dhk->blhk", x, params[name]["kernel"]) + params[name].get("bias", 0.0)
    q, k = norm(project("query"), *norm_args("query_norm")), norm(project("key"), *norm_args("key_norm"))
    logits = cap(jnp.einsum("bthk,bshk->bhts", q, k) / np.sqrt(head_dim), softcap)
    logits = jnp.where(jnp.tril(jnp.ones((5, 5), bool)), logits, -jnp.inf)
    weights = jnp.exp(logits - logits.max(-1, keepdims=True))
    out = jnp.einsum("bhts,bshk->bthk", weights / weights.sum(-1, keepdims=True), project("value"))
    return jnp.einsum("bthk,hkd->btd", out, params["out"]["kernel"]) + params["out"].get("bias", 0.0)

  got = jax.jit(mha.apply)({"params": params}, x)
  np.testing.assert_allclose(got, formula(params, x), rtol=1e-5, atol=1e-5)


def softcapped_attention(q, k, v, softcap):
  """softmax(c tanh(q k / sqrt(d) / c)) v, causal, every key visible to itself."""
  logits = cap(jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1]), softcap)
  length = q.shape[1]
  logits = jnp.where(jnp.tril(jnp.ones((length, length), bool)), logits, -jnp.inf)
  return jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(logits, axis=-1), v)


@pytest.mark.parametrize("name", ["dot_product", "chunked", "auto"])
def test_attention_logit_softcap_is_its_formula_forward_and_backward(name):
  """The variants that declare "softcap" against the formula, gradients included (chunked: its own backward,
  over several blocks)."""
  q, k, v = random_qkv(16)
  q = 3.0 * q  # logits of std ~ 3 against a cap of 2.
  variant = attention.get(name)
  fn = lambda q, k, v: variant.fn(q, k, v, causal=True, logits_softcap=2.0, **variant.example_options)
  cotangent = normal(17, q.shape)
  loss = lambda f: lambda q, k, v: jnp.sum(f(q, k, v) * cotangent)
  got, got_grads = jax.jit(jax.value_and_grad(loss(fn), argnums=(0, 1, 2)))(q, k, v)
  got_out = jax.jit(fn)
  want, want_grads = jax.jit(jax.value_and_grad(loss(functools.partial(softcapped_attention, softcap=2.0)),
                                                argnums=(0, 1, 2)))(q, k, v)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(g, w, atol=1e-5)
  plain = jax.jit(lambda q, k, v: variant.fn(q, k, v, causal=True, **variant.example_options))(q, k, v)
  assert np.abs(np.asarray(plain - got_out(q, k, v))).max() > 0.05  # the cap changes the result.


def test_auto_gives_the_softcap_to_splash_and_falls_back_from_the_gpu_kernels():
  """Splash takes the logit soft-cap (its `attn_logits_soft_cap`); the GPU kernels do not declare it: refused, named
  with why, and `auto` falls back."""
  q, k, v = (x.astype(jnp.bfloat16) for x in random_qkv(0))
  assert auto.choose(q, k, v, backend="tpu", causal=True, logits_softcap=2.0).kernel == "splash"
  choice = auto.choose(q, k, v, backend="gpu", causal=True, logits_softcap=2.0)
  assert choice.kernel in ("dot_product", "chunked")
  assert {name for name, _ in choice.refused} == {kernel.name for kernel in attention.kernels("gpu")}
  assert all(reason == "does not support ['softcap']" for _, reason in choice.refused)


def test_a_variant_without_softcap_is_refused_when_the_config_is_checked():
  with pytest.raises(ValueError, match=r"attention variant 'xla' does not support 'softcap' for "
                                       r"model.attention_logit_softcap=2.0"):
    TransformerConfig.from_config({"attention": "xla", "attention_logit_softcap": 2.0})
  with pytest.raises(ValueError, match=r"does not support \['softcap'\], which this call asks for"):
    attention.get("xla").fn(*random_qkv(0), logits_softcap=2.0)


# ---------------------------------------------------------------------------------------------- output and loss


def test_final_logit_softcap_caps_the_model_logits():
  lm = {"model.architecture": "lm", "model.num_decoder_layers": 1}
  y = tokens(1, (2, 5))
  plain, capped = tiny(**lm), tiny(**lm, **{"model.final_logit_softcap": 1.0})
  params = jit_init(plain, y)
  raw, got = jax.jit(lambda params: (plain.apply(params, y), capped.apply(params, y)))(params)
  np.testing.assert_allclose(got, cap(raw, 1.0), rtol=1e-5, atol=1e-6)
  assert np.abs(np.asarray(raw)).max() > 1.5  # logits beyond the cap: capping shows.


def cross_entropy_with_z_loss(logits, targets, weights, eps, z_weight):
  """sum_t w_t (-sum_v q_v log p_v - H(q) + a (log Z)^2), q the smoothed target, and the z-loss part alone."""
  vocab = logits.shape[-1]
  log_z = jnp.log(jnp.sum(jnp.exp(logits), axis=-1))
  log_p = logits - log_z[..., None]
  low = eps / (vocab - 1)
  q = jnp.where(jax.nn.one_hot(targets, vocab) > 0, 1.0 - eps, low)
  xlogx = lambda p: p * np.log(p) if p > 0 else 0.0
  entropy = -(xlogx(1 - eps) + (vocab - 1) * xlogx(low))
  z_loss = z_weight * log_z**2
  per_token = -jnp.sum(q * log_p, axis=-1) - entropy + z_loss
  return jnp.sum(weights * per_token), jnp.sum(weights * z_loss)


def test_fused_loss_with_softcap_and_z_loss_is_the_formula_forward_and_backward():
  h, table = 2.0 * normal(3, (2, 7, 6)), normal(4, (13, 6))
  targets = jax.random.randint(jax.random.PRNGKey(5), (2, 7), 1, 13)
  weights = jnp.ones((2, 7)).at[1, 5:].set(0.0)

  def fused(h, table):
    sums = linear_cross_entropy_sums(h, table, targets, weights, 0.1, chunk_tokens=4, logits_softcap=3.0,
                                     z_loss=0.01)
    return sums.loss, sums

  def formula(h, table):
    loss, z_loss = cross_entropy_with_z_loss(cap(h @ table.T, 3.0), targets, weights, 0.1, 0.01)
    return loss, z_loss

  (loss, sums), grads = jax.jit(jax.value_and_grad(fused, argnums=(0, 1), has_aux=True))(h, table)
  (want, want_z), want_grads = jax.jit(jax.value_and_grad(formula, argnums=(0, 1), has_aux=True))(h, table)
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  np.testing.assert_allclose(sums.z_loss, want_z, rtol=1e-5)
  assert float(sums.weight) == 12.0 and float(want_z) > 1e-3
  for g, w in zip(grads, want_grads):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_train_step_adds_the_z_loss_and_reports_it_and_evaluation_leaves_it_out():
  """The train step's loss is the cross-entropy plus the z-loss, `metrics["z_loss"]` the z-loss per target token:
  both equal their formulas on the model's (soft-capped) logits; the eval step's NLL is the cross-entropy alone."""
  model = tiny(**{"model.architecture": "lm", "model.num_decoder_layers": 1, "model.dropout_rate": 0.0,
                  "model.z_loss": 0.01, "model.final_logit_softcap": 5.0})
  targets = tokens(1, (2, 6)).at[1, 4:].set(0)
  batch = {"targets": targets}
  tx, schedule = optim.build_optimizer(config_lib.base_config().optimizer, model.config.d_model)

  @jax.jit
  def run(rng):  # one compiled program: init, a train step, an eval step, the logits.
    state = init_train_state(model, tx, rng, batch)
    _, metrics = make_train_step(model, tx, schedule, label_smoothing=0.0)(state, batch)
    return metrics, make_eval_step(model)(state.params, batch), model.apply({"params": state.params}, targets)

  metrics, evaluated, logits = run(jax.random.PRNGKey(0))
  weights = (targets != 0).astype(jnp.float32)
  loss, z_loss = cross_entropy_with_z_loss(logits, targets, weights, 0.0, 0.01)
  np.testing.assert_allclose(metrics["loss"], loss / weights.sum(), rtol=1e-5)
  np.testing.assert_allclose(metrics["z_loss"], z_loss / weights.sum(), rtol=1e-5)
  np.testing.assert_allclose(evaluated["nll_sum"], loss - z_loss, rtol=1e-5)
  assert float(z_loss) > 1e-3


# ---------------------------------------------------------------------------------------------- the whole block

MODERN = {"model.norm": "pre", "model.normalization": "rmsnorm", "model.activation": "swiglu", "model.d_ff": 44,
          "model.qk_norm": True, "model.attention_logit_softcap": 5.0, "model.final_logit_softcap": 10.0,
          "model.use_bias": False, "model.positional": "rotary"}


@pytest.mark.integration  # trains or decodes a model for seconds: the integration tier.
def test_modern_block_has_its_parameters_and_decodes_from_its_cache_as_the_full_forward():
  """Pre-RMSNorm, SwiGLU, QK-norm, both soft-caps, rotary, no biases: no bias anywhere, the QK-norm scales in every
  attention, and cached decoding (normalized keys in the cache, cross-attention keys projected once) equals the
  teacher-forced pass."""
  model = tiny(**MODERN, **{"model.num_encoder_layers": 1})
  x, y = tokens(0, (2, 6)), tokens(1, (2, 5))
  x = x.at[1, 4:].set(0)
  params = {"params": perturbed(jit_init(model, x, y)["params"])}
  full, encoded = jax.jit(lambda params: (model.apply(params, x, y), model.apply(params, x, method=model.encode)))(
      params)
  paths = leaf_paths(params["params"])
  assert not [p for p in paths if p.endswith("bias")]
  layer = {p.split("/", 2)[2] for p in paths if p.startswith("decoder/layer_1/")}
  assert layer == {"self_attention/query/kernel", "self_attention/key/kernel", "self_attention/value/kernel",
                   "self_attention/out/kernel", "self_attention/query_norm/scale", "self_attention/key_norm/scale",
                   "cross_attention/query/kernel", "cross_attention/key/kernel", "cross_attention/value/kernel",
                   "cross_attention/out/kernel", "cross_attention/query_norm/scale",
                   "cross_attention/key_norm/scale", "feed_forward/wi_0/kernel", "feed_forward/wi_1/kernel",
                   "feed_forward/wo/kernel", "self_attention_norm/scale", "cross_attention_norm/scale",
                   "feed_forward_norm/scale"}
  np.testing.assert_allclose(decode_step_by_step(model, params["params"], encoded, x, y, jit=True), full, atol=1e-4)


def test_final_norm_can_be_dropped_from_a_pre_norm_stack_only():
  shapes = lambda **o: summary.param_shapes(tiny(**o))
  assert "final_norm" in shapes(**{"model.norm": "pre"})["decoder"]
  assert "final_norm" not in shapes(**{"model.norm": "pre", "model.final_norm": False})["decoder"]
  with pytest.raises(ValueError, match=r"final_norm=False drops the final norm of a pre-norm stack"):
    tiny(**{"model.final_norm": False})


# The default block's parameter names (one decoder layer): old checkpoints restore into it.
PAPER_DECODER_LAYER = {
    f"{sub}/{name}/{kind}" for sub in ("self_attention", "cross_attention")
    for name, kinds in (("query", ("kernel", "bias")), ("key", ("kernel",)), ("value", ("kernel", "bias")),
                        ("out", ("kernel", "bias"))) for kind in kinds} | {
    "feed_forward/wi/kernel", "feed_forward/wi/bias", "feed_forward/wo/kernel", "feed_forward/wo/bias"} | {
    f"{norm}/{kind}" for norm in ("self_attention_norm", "cross_attention_norm", "feed_forward_norm")
    for kind in ("scale", "bias")}


def test_the_default_block_keeps_the_paper_parameter_names():
  paths = leaf_paths(nn.meta.unbox(summary.param_shapes(tiny())))
  assert {p.split("/", 2)[2] for p in paths if p.startswith("decoder/layer_0/")} == PAPER_DECODER_LAYER
  assert not [p for p in paths if "final_norm" in p or "query_norm" in p]


# ---------------------------------------------------------------------------------------------- plug-ins


def test_a_plug_in_norm_and_activation_are_used_by_the_model(scratch_registries):
  @norms.register("scale_only")
  def scale_only(*, use_bias, name):
    """x * scale: a norm that does not normalize (for the test)."""
    del use_bias
    return ScaleOnly(name=name)

  @activations.register("squared_relu")
  def squared_relu(x):
    """relu(x)^2 (So et al. 2021)."""
    return jnp.square(jax.nn.relu(x))

  with pytest.raises(ValueError, match="'scale_only' is registered twice"):
    norms.register("scale_only")(scale_only)
  with pytest.raises(ValueError, match=r"must accept the keyword arguments \['name', 'use_bias'\]"):
    norms.register("bad")(lambda x: x)
  cfg = TransformerConfig(d_model=8, num_heads=2, d_ff=12, activation="squared_relu", normalization="scale_only")
  x = normal(6, (2, 3, 8))
  ff = FeedForward(cfg)
  params = perturbed(ff.init(jax.random.PRNGKey(0), x)["params"])
  hidden = jnp.square(jnp.maximum(x @ params["wi"]["kernel"] + params["wi"]["bias"], 0.0))
  np.testing.assert_allclose(ff.apply({"params": params}, x), hidden @ params["wo"]["kernel"] + params["wo"]["bias"],
                             rtol=1e-5, atol=1e-5)
  model = tiny(**{"model.normalization": "scale_only", "model.activation": "squared_relu"})
  layer = nn.meta.unbox(summary.param_shapes(model))["encoder"]["layer_0"]
  assert set(layer["self_attention_norm"]) == {"scale"} and set(layer["feed_forward"]) == {"wi", "wo"}
  with pytest.raises(ValueError, match=r"unknown normalization 'nope'; known: \['layernorm', 'rmsnorm', "
                                       r"'rmsnorm_plus_one', 'scale_only'\]"):
    tiny(**{"model.normalization": "nope"})


class ScaleOnly(nn.Module):
  @nn.compact
  def __call__(self, x):
    return x * self.param("scale", nn.initializers.ones, (x.shape[-1],))


# The paper configs' exact parameter counts, with the default block: d = d_model, F = d_ff, N = 6, V = 37,000,
#   each attention 4 d^2 + 3 d (no key bias: softmax ignores it), each LayerNorm 2 d, each FFN 2 d F + F + d,
#   encoder layer: attention + FFN + 2 norms; decoder layer: 2 attentions + FFN + 3 norms; one shared, tied V x d
#   embedding; post-norm (no final norm), sinusoidal positions (no parameters).
# base: 6 (3,151,872 + 4,203,008) + 18,944,000 = 63,073,280; big: 6 (12,595,200 + 16,794,624) + 37,888,000 =
# 214,226,944. The paper's Table 3 gives 65M and 213M, rounded, for a vocabulary of "about 37000" BPE tokens whose
# exact size and bias conventions it does not state: within 3% either way.
@pytest.mark.parametrize("config_file, count, paper", [("transformer_base.py", 63_073_280, 65e6),
                                                       ("transformer_big.py", 214_226_944, 213e6)])
def test_paper_configs_keep_their_exact_parameter_counts(repo_root, config_file, count, paper):
  model = tasks.build_model(config_lib.load(repo_root / "configs" / config_file))
  assert summary.count_by_module(summary.param_shapes(model))["total"] == count
  assert abs(count - paper) / paper < 0.03
