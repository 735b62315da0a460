"""The block options that pretrained families need (`jformer import-hf`), each against its formula written out here:
unscaled token embeddings (`model.scale_embeddings`), the norm epsilon (`model.norm_epsilon`), query/key/value
biases with rotary positions (`model.qkv_bias`), the padding logit masked (`model.predicts_padding`), a learned bias
on the logits (`model.final_logits_bias`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_block_options import jit_init, normal, perturbed
from jformer.models import TransformerConfig, norms
from jformer.models.layers import Embed, MultiHeadAttention, norm
from jformer.ops.positional import apply_rotary


def causal_rotary_attention(x, params, groups: int, scale_dim: int):
  """The reference of the attention tests here: causal self-attention of `x` `[B, T, D]` with rotary positions,
  written out from a MultiHeadAttention's `params` (projections with their biases where they have them), each key
  and value head serving `groups` query heads, logits q.k / sqrt(scale_dim)."""
  project = lambda name: jnp.einsum("bld,dhk->blhk", x, params[name]["kernel"]) + params[name].get("bias", 0.0)
  positions, length = jnp.arange(x.shape[1])[None], x.shape[1]
  q, k = apply_rotary(project("query"), positions), apply_rotary(project("key"), positions)
  k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(project("value"), groups, axis=2)
  logits = jnp.einsum("bthk,bshk->bhts", q, k) / np.sqrt(scale_dim)
  logits = jnp.where(jnp.tril(jnp.ones((length, length), bool)), logits, -jnp.inf)
  out = jnp.einsum("bhts,bshk->bthk", jax.nn.softmax(logits, -1), v)
  return jnp.einsum("bthk,hkd->btd", out, params["out"]["kernel"])


@pytest.mark.parametrize("scale", [True, False])
def test_embeddings_are_scaled_by_sqrt_d_model_unless_told_not_to(scale):
  embed = Embed(vocab_size=11, d_model=8, scale=scale)
  ids = jnp.array([[3, 0, 10]])
  params = perturbed(embed.init(jax.random.PRNGKey(0), ids)["params"])
  rows = params["embedding"][np.array([3, 0, 10])][None]
  np.testing.assert_allclose(embed.apply({"params": params}, ids), rows * (np.sqrt(8.0) if scale else 1.0), rtol=1e-6)


@pytest.mark.parametrize("normalization", ["rmsnorm", "layernorm"])
def test_norm_epsilon_reaches_the_norm(normalization):
  """x / sqrt(mean(x^2) + eps) * scale (RMSNorm), (x - mean) / sqrt(var + eps) * scale + bias (LayerNorm), at an
  epsilon large enough to matter (0.5 against values of size ~0.1)."""
  eps = 0.5
  cfg = TransformerConfig(d_model=8, num_heads=2, normalization=normalization, norm_epsilon=eps)
  x = 0.1 * normal(0, (2, 3, 8))
  module = norm(cfg, "n")
  params = perturbed(module.init(jax.random.PRNGKey(0), x)["params"])
  if normalization == "rmsnorm":
    want = x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * params["scale"]
  else:
    centred = x - x.mean(-1, keepdims=True)
    want = centred / jnp.sqrt(jnp.mean(centred**2, -1, keepdims=True) + eps) * params["scale"] + params["bias"]
  np.testing.assert_allclose(module.apply({"params": params}, x), want, rtol=1e-5, atol=1e-6)


def test_a_norm_without_epsilon_is_refused_a_non_default_one(scratch_registries):
  import flax.linen as nn

  @norms.register("plain_rms")
  def plain_rms(*, use_bias, name):
    """RMSNorm at flax's epsilon, written before model.norm_epsilon existed."""
    del use_bias
    return nn.RMSNorm(name=name)

  TransformerConfig(d_model=8, num_heads=2, normalization="plain_rms").validate()  # the default epsilon: fine.
  with pytest.raises(ValueError, match="normalization 'plain_rms' takes no epsilon"):
    TransformerConfig(d_model=8, num_heads=2, normalization="plain_rms", norm_epsilon=1e-5).validate()
  with pytest.raises(ValueError, match="norm_epsilon=0.0 is not positive"):
    TransformerConfig(d_model=8, num_heads=2, norm_epsilon=0.0).validate()


def test_qkv_bias_adds_the_three_biases_the_key_one_turned_by_rotary_positions():
  """softmax(R(x Wq + bq) . R(x Wk + bk) / sqrt(d)) (x Wv + bv) Wo, causal, grouped-query (4 query heads over 2
  key/value heads), R the rotary rotation; no output bias (model.use_bias False, as Qwen2). The key bias matters
  here: dropping it changes the output."""
  d_model, heads, kv_heads, head_dim, length = 16, 4, 2, 4, 5
  cfg = TransformerConfig(d_model=d_model, num_heads=heads, num_kv_heads=kv_heads, attention="dot_product",
                          positional="rotary", use_bias=False, qkv_bias=True)
  mha = MultiHeadAttention(cfg, causal=True, rotary=True)
  x = normal(2, (2, length, d_model))
  params = perturbed(jit_init(mha, x)["params"])
  assert {name for name in params if "bias" in params[name]} == {"query", "key", "value"}

  formula = lambda params: causal_rotary_attention(x, params, heads // kv_heads, head_dim)
  got = jax.jit(mha.apply)({"params": params}, x)
  np.testing.assert_allclose(got, formula(params), rtol=1e-5, atol=1e-5)
  no_key_bias = {**params, "key": {**params["key"], "bias": jnp.zeros_like(params["key"]["bias"])}}
  assert np.abs(np.asarray(got) - np.asarray(formula(no_key_bias))).max() > 1e-3


LM_FIELDS = dict(architecture="lm", vocab_size=12, d_model=8, num_heads=2, d_ff=16, num_decoder_layers=1)


def losses(model, targets):
  """(fused, formula), each a function of the params: the loss the train step computes from the hidden states
  (`ops.linear_cross_entropy`, projecting them itself) and the cross-entropy of the model's logits written out."""
  from jformer.ops.linear_cross_entropy import linear_cross_entropy_sums

  weights = (targets != 0).astype(jnp.float32)

  def fused(params):
    return linear_cross_entropy_sums(*model.apply({"params": params}, targets, return_hidden=True), targets,
                                     weights).loss

  def formula(params):
    log_p = jax.nn.log_softmax(model.apply({"params": params}, targets), -1)
    return -jnp.sum(weights * jnp.take_along_axis(log_p, targets[..., None], -1)[..., 0])

  return fused, formula


@pytest.mark.slow  # two models' gradients: seconds.
def test_predicts_padding_false_masks_the_padding_logit_in_the_logits_and_the_fused_loss():
  """logits[..., 0] = -1e9, the others unchanged; the loss the train step computes from the hidden states (the
  fused projection, `ops.padding_logit.mask_row`) is the cross-entropy of those masked logits, its gradient too."""
  from jformer.models import LanguageModel

  targets = jnp.array([[3, 5, 1, 0], [7, 1, 0, 0]])
  plain, masked = (LanguageModel(TransformerConfig(**LM_FIELDS, predicts_padding=p)) for p in (True, False))
  params = perturbed(plain.init(jax.random.PRNGKey(0), targets)["params"])
  logits, got = plain.apply({"params": params}, targets), masked.apply({"params": params}, targets)
  np.testing.assert_array_equal(got[..., 1:], logits[..., 1:])
  assert (got[..., 0] == -1e9).all()
  fused, formula = losses(masked, targets)
  np.testing.assert_allclose(fused(params), formula(params), rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), jax.grad(fused)(params),
               jax.grad(formula)(params))
  with pytest.raises(ValueError, match="predicts_padding=False masks the padding logit before final_logit_softcap"):
    TransformerConfig(**LM_FIELDS, predicts_padding=False, final_logit_softcap=30.0).validate()


def logits_bias_models():
  """(model without the bias, model with it, the latter's perturbed params, targets `[B, T]`)."""
  from jformer.models import LanguageModel

  plain, biased = (LanguageModel(TransformerConfig(**LM_FIELDS, final_logits_bias=b)) for b in (False, True))
  targets = jnp.array([[3, 5, 1, 0], [7, 1, 0, 0]])
  params = perturbed(biased.init(jax.random.PRNGKey(0), targets)["params"])
  return plain, biased, params, targets


def test_final_logits_bias_adds_a_learned_bias_to_every_logit():
  """z = y E^T + b (Marian's final_logits_bias): the biased model's logits are the unbiased one's plus b `[V]`."""
  plain, biased, params, targets = logits_bias_models()
  bias = params["decoder"]["final_logits_bias"]
  assert bias.shape == (12,) and np.abs(bias).max() > 0.1  # perturbed away from its zero initial value.
  without = {**params, "decoder": {k: v for k, v in params["decoder"].items() if k != "final_logits_bias"}}
  np.testing.assert_allclose(biased.apply({"params": params}, targets),
                             plain.apply({"params": without}, targets) + bias, rtol=1e-6, atol=1e-6)


@pytest.mark.slow  # a model's gradients, two ways: seconds.
def test_final_logits_bias_reaches_the_fused_loss_and_its_gradient():
  """The loss the train step computes from the hidden states (`ops.logit_bias`: the bias as one more feature) is
  the cross-entropy of y E^T + b; its gradient too, the bias's included."""
  _, biased, params, targets = logits_bias_models()
  fused, formula = losses(biased, targets)
  np.testing.assert_allclose(fused(params), formula(params), rtol=1e-5)
  got, want = jax.grad(fused)(params), jax.grad(formula)(params)
  assert np.abs(want["decoder"]["final_logits_bias"]).max() > 1e-3
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), got, want)
