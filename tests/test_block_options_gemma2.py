"""The block options Gemma 2 needs (Gemma Team 2024; `jformer/interop/gemma2.py`), each against its formula written
out here: RMSNorm with weight 1 + scale (`model.normalization='rmsnorm_plus_one'`), a head width apart from
d_model / heads (`model.head_dim`) with logits scaled by another dimension (`model.attention_scale_dim`), and a norm
of each sublayer's output (`model.post_norm`)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from test_block_options import jit_init, normal, perturbed
from test_block_options_pretrained import causal_rotary_attention
from jformer.models import TransformerConfig
from jformer.models.flops import train_flops
from jformer.models.layers import FeedForward, MultiHeadAttention, norm
from jformer.models.transformer import DecoderLayer

EPS = 0.1  # large enough to matter against inputs of size ~1.


def rms_norm_plus_one(x, scale):
  return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * (1.0 + scale)


def test_rmsnorm_plus_one_is_its_formula_and_starts_as_plain_rmsnorm():
  """x / sqrt(mean(x^2) + eps) * (1 + scale) over the last axis, scale `[F]` initialised to 0, eps from the config."""
  cfg = TransformerConfig(d_model=8, num_heads=2, normalization="rmsnorm_plus_one", norm_epsilon=EPS)
  x = normal(0, (2, 3, 8))
  module = norm(cfg, "n")
  initial = jit_init(module, x)["params"]
  assert set(initial) == {"scale"} and not np.asarray(initial["scale"]).any()
  params = perturbed(initial)
  got = module.apply({"params": params}, x)
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(got, rms_norm_plus_one(x, params["scale"]), rtol=1e-6, atol=1e-6)
  plain = TransformerConfig(d_model=8, num_heads=2, normalization="rmsnorm", norm_epsilon=EPS)
  np.testing.assert_allclose(module.apply({"params": initial}, x),
                             norm(plain, "n").apply({"params": {"scale": jnp.ones(8)}}, x), rtol=1e-6)


def test_head_dim_and_attention_scale_dim_are_the_formula():
  """softmax(R(x Wq) . R(x Wk) / sqrt(s)) (x Wv) Wo, causal, rotary R, Wq `[D, H, K]` with H K != D (D 8, 4 query
  heads over 2 key/value heads of K 6), s = attention_scale_dim 5 instead of K."""
  d_model, heads, kv_heads, head_dim, scale_dim, length = 8, 4, 2, 6, 5.0, 5
  cfg = TransformerConfig(d_model=d_model, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                          attention_scale_dim=scale_dim, attention="dot_product", positional="rotary", use_bias=False)
  mha = MultiHeadAttention(cfg, causal=True, rotary=True)
  x = normal(1, (2, length, d_model))
  params = perturbed(jit_init(mha, x)["params"])
  assert params["query"]["kernel"].shape == (d_model, heads, head_dim)
  assert params["key"]["kernel"].shape == (d_model, kv_heads, head_dim)
  assert params["out"]["kernel"].shape == (heads, head_dim, d_model)

  formula = lambda scale_dim: causal_rotary_attention(x, params, heads // kv_heads, scale_dim)

  got = jax.jit(mha.apply)({"params": params}, x)
  np.testing.assert_allclose(got, formula(scale_dim), rtol=1e-5, atol=1e-5)
  assert np.abs(np.asarray(got - formula(head_dim))).max() > 1e-3  # the scale shows.


def test_head_dim_frees_d_model_from_the_heads_and_counts_in_the_flops():
  TransformerConfig(d_model=10, num_heads=4, head_dim=3).validate()
  with pytest.raises(ValueError, match=r"d_model=10 is not divisible by num_heads=4 \(or set model.head_dim\)"):
    TransformerConfig(d_model=10, num_heads=4).validate()
  fields = dict(architecture="lm", vocab_size=16, d_model=8, num_heads=2, d_ff=16, num_decoder_layers=1)
  same = train_flops(TransformerConfig(**fields, head_dim=4), rows=1, length=4)
  assert same == train_flops(TransformerConfig(**fields), rows=1, length=4)
  # Q, K, V, O: 4 * 2 * n * d * (H K); scores and values: 4 * n^2 * (H K); x3 for the step; H K 12 instead of 8.
  n, d = 4, 8
  attention = lambda width: 3 * (8 * n * d * width + 4 * n * n * width)
  assert train_flops(TransformerConfig(**fields, head_dim=6), rows=1, length=4) - same == attention(12) - attention(8)


def test_post_norm_normalizes_each_sublayer_output_before_the_residual_add():
  """y = x + N_post_a(Attn(N_a(x))), out = y + N_post_f(FFN(N_f(y))), every norm RMSNorm(1 + scale) with its own
  scale (Gemma 2's input, post_attention, pre_feedforward and post_feedforward layernorms)."""
  cfg = TransformerConfig(architecture="lm", d_model=8, num_heads=2, d_ff=16, num_decoder_layers=1, norm="pre",
                          post_norm=True, normalization="rmsnorm_plus_one", norm_epsilon=EPS, activation="geglu",
                          attention="dot_product", use_bias=False, dropout_rate=0.0)
  x = normal(2, (2, 5, 8))
  layer = DecoderLayer(cfg)
  params = perturbed(jit_init(layer, x)["params"])
  assert set(params) == {"self_attention_norm", "self_attention_post_norm", "self_attention", "feed_forward_norm",
                         "feed_forward_post_norm", "feed_forward"}
  attend = lambda h: MultiHeadAttention(cfg, causal=True).apply({"params": params["self_attention"]}, h)
  feed_forward = lambda h: FeedForward(cfg).apply({"params": params["feed_forward"]}, h)
  scale = lambda name: params[name]["scale"]
  y = x + rms_norm_plus_one(attend(rms_norm_plus_one(x, scale("self_attention_norm"))),
                            scale("self_attention_post_norm"))
  want = y + rms_norm_plus_one(feed_forward(rms_norm_plus_one(y, scale("feed_forward_norm"))),
                               scale("feed_forward_post_norm"))
  np.testing.assert_allclose(jax.jit(layer.apply)({"params": params}, x), want, rtol=1e-5, atol=1e-5)
  without = jit_init(DecoderLayer(dataclasses.replace(cfg, post_norm=False)), x)["params"]
  assert set(params) - set(without) == {"self_attention_post_norm", "feed_forward_post_norm"}
  with pytest.raises(ValueError, match=r"post_norm=True normalizes a pre-norm block's sublayer outputs; with "
                                       r"norm='post'"):
    TransformerConfig(post_norm=True, norm="post").validate()
