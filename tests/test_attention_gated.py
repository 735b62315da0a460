"""`gated` (gated attention, Qiu et al. 2025) against the paper's formula written out here, outputs and gradients
(the layer input and the gate's weights included); causality; in a layer pattern beside softmax layers, cached
generation equal to the full forward pass. tests/test_attention_variants.py checks it in every masking it declares,
decode steps included."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_equals_formula
from test_decode_generate import check_cached_generation_equals_full_forward, lm_and_params

from jformer import attention
from jformer.decode import generator

GATED = attention.get("gated")
B, T, H, K, D, D_MODEL = 2, 7, 4, 2, 8, 16  # K = 2 key/value heads for H = 4 query heads.


def dense_gated(q, k, v, x, w, causal: bool):
  """Y' = Y * sigmoid(X W_g), Y = softmax(Q K^T / sqrt(d)) V per head, written out: key/value head h // (H / K)."""
  k, v = (jnp.repeat(a, H // K, axis=2) for a in (k, v))
  logits = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D)
  if causal:
    logits = jnp.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
  weights = jnp.exp(logits - logits.max(-1, keepdims=True))
  y = jnp.einsum("bhts,bshd->bthd", weights / weights.sum(-1, keepdims=True), v)
  return y / (1.0 + jnp.exp(-jnp.einsum("btm,mhf->bthf", x, w)))


def gated_call(q, k, v, x, w, causal: bool):
  """The variant as the model calls it: the gate's logits captured from the layer input x by its declared capture."""
  params = {"gate": w}
  captures = {"q": {"gate": GATED.captures["gate"].values(x, params)}, "kv": {}}
  return GATED.fn(q, k, v, causal=causal, params=params, captures=captures)


def inputs(seed: int):
  keys = jax.random.split(jax.random.PRNGKey(seed), 5)
  return (jax.random.normal(keys[0], (B, T, H, D)), jax.random.normal(keys[1], (B, T, K, D)),
          jax.random.normal(keys[2], (B, T, K, D)), jax.random.normal(keys[3], (B, T, D_MODEL)),
          0.3 * jax.random.normal(keys[4], (D_MODEL, H, D)))


@pytest.mark.parametrize("causal", [True, False])
def test_gated_is_the_papers_formula_outputs_and_gradients(causal):
  """Outputs and the gradients wrt Q, K, V, the layer input X and W_g equal the formula's (float32)."""
  args = inputs(0)
  cotangent = jax.random.normal(jax.random.PRNGKey(9), (B, T, H, D))
  assert_equals_formula(functools.partial(gated_call, causal=causal), functools.partial(dense_gated, causal=causal),
                        args, cotangent, ("query", "key", "value", "x", "gate"))
  ungated = attention.get("dot_product").fn(*args[:3], causal=causal)
  assert np.abs(np.asarray(gated_call(*args, causal=causal) - ungated)).max() > 0.1  # the gate does act


def test_gated_is_causal():
  """Changing the keys and values (and the layer input) from position 4 on leaves the outputs before it unchanged."""
  q, k, v, x, w = inputs(1)
  later = (jnp.arange(T) >= 4)[None, :, None, None]
  changed = [jnp.where(later, 5.0 + a, a) for a in (k, v)] + [jnp.where(later[..., 0], 5.0 + x, x)]
  out, moved = (jax.jit(gated_call, static_argnums=5)(q, *kvx, w, True) for kvx in ((k, v, x), changed))
  np.testing.assert_array_equal(out[:, :4], moved[:, :4])
  assert np.abs(np.asarray(out[:, 4:] - moved[:, 4:])).min() > 0


def test_a_gate_not_shaped_like_the_output_is_refused():
  q, k, v, x, w = inputs(2)
  for logits in (jnp.zeros((B, T, H)), jnp.zeros((B, T, H, D + 1))):
    with pytest.raises(ValueError, match=r"'gated': the gate's logits \(captures\['q'\]\['gate'\]\) must be shaped "
                                         r"like the output \[B, T, H, Dv\] = \[2, 7, 4, 8\]"):
      GATED.fn(q, k, v, params={"gate": w}, captures={"q": {"gate": logits}, "kv": {}})
  with pytest.raises(ValueError, match=r"holding its declared captures \['gate'\] at the queries and \[\] at the keys"):
    GATED.fn(q, k, v, params={"gate": w}, captures={"q": {"gate": jnp.zeros((B, T, H, D))}, "kv": {"gate": x}})


@pytest.mark.integration  # a 2-layer LM compiled for generation: 8-24 s on 2 busy cores.
def test_gated_layers_beside_softmax_layers_generate_as_the_full_forward():
  """A 2-layer LM of pattern (gated, softmax): W_g `[d_model, H, head_dim]` in the gated layer only, nothing of the
  gate in the decode cache, and cached generation equal to the full forward pass."""
  model, params = lm_and_params(**{"model.layer_kinds": {"gated": {"attention": "gated"},
                                                         "softmax": {"attention": "dot_product"}},
                                   "model.layer_pattern": ("gated", "softmax")})
  assert params["decoder"]["layer_0"]["self_attention"]["gated"]["gate"].shape == (32, 4, 8)
  assert "gated" not in params["decoder"]["layer_1"]["self_attention"]
  cache = jax.eval_shape(lambda p: generator.init_cache(model, p, 2, 12), params)
  assert not [path for path, _ in jax.tree_util.tree_flatten_with_path(cache)[0] if "captured" in str(path)]
  check_cached_generation_equals_full_forward(model, params)
