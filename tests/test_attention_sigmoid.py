"""`sigmoid` (sigmoid attention, Ramapuram et al. 2024) against the paper's formula written out here, outputs and
gradients; no normalisation (a query that sees nothing gets 0); causality; in a layer pattern beside softmax layers,
cached generation equal to the full forward pass. tests/test_attention_variants.py checks it in every masking it
declares, decode steps included."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_equals_formula
from test_decode_generate import check_cached_generation_equals_full_forward, lm_and_params

from jformer import attention

SIGMOID = attention.get("sigmoid")
B, T, H, K, D, N = 2, 7, 4, 2, 8, 16  # K = 2 key/value heads for H = 4 query heads; n = 16.
PADDING = np.array([[1] * 5 + [0] * 2, [1] * 7])  # row 0: 5 tokens, then padding


def dense_sigmoid(q, k, v, bias, causal: bool):
  """out_i = sum_j sigmoid(q_i . k_j / sqrt(d) + bias_ij - log n) v_j over the visible keys (same segment, j <= i
  when causal), written out: key/value head h // (H / K)."""
  k, v = (jnp.repeat(a, H // K, axis=2) for a in (k, v))
  logits = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D) + bias - np.log(N)
  visible = (PADDING[:, :, None] == PADDING[:, None, :]) & (PADDING[:, None, :] != 0)
  if causal:
    visible = visible & np.tril(np.ones((T, T), bool))
  weights = jnp.where(visible[:, None], 1.0 / (1.0 + jnp.exp(-logits)), 0.0)
  return jnp.einsum("bhts,bshd->bthd", weights, v)


def sigmoid_call(q, k, v, bias, causal: bool):
  return SIGMOID.fn(q, k, v, causal=causal, q_segment_ids=PADDING, kv_segment_ids=PADDING, bias=bias,
                    sequence_length=N)


def inputs(seed: int):
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  return (jax.random.normal(keys[0], (B, T, H, D)), jax.random.normal(keys[1], (B, T, K, D)),
          jax.random.normal(keys[2], (B, T, K, D)), jax.random.normal(keys[3], (1, H, T, T)))


@pytest.mark.parametrize("causal", [True, False])
def test_sigmoid_is_the_papers_formula_outputs_and_gradients(causal):
  """Outputs and the gradients wrt Q, K, V and a logits bias equal the formula's (float32), padding included."""
  args = inputs(0)
  cotangent = jax.random.normal(jax.random.PRNGKey(9), (B, T, H, D))
  assert_equals_formula(functools.partial(sigmoid_call, causal=causal), functools.partial(dense_sigmoid, causal=causal),
                        args, cotangent, ("query", "key", "value", "bias"))


def test_sigmoid_weights_are_not_normalised():
  """A padding query sees no key and gets 0 (softmax would give some mean of the values); the weights of a row do
  not sum to 1; and n enters as b = -log(n)."""
  q, k, v, bias = inputs(1)
  out = sigmoid_call(q, k, v, bias, causal=True)
  np.testing.assert_array_equal(out[0, 5:], 0.0)
  weights = SIGMOID.weights(q, k, causal=True, sequence_length=N)
  assert np.abs(np.asarray(weights.sum(-1)) - 1.0).min() > 1e-3
  longer = SIGMOID.weights(q, k, causal=True, sequence_length=4 * N)
  logit = lambda w: np.log(w) - np.log1p(-w)  # of the visible keys': sigmoid's inverse.
  visible = np.tril(np.ones((T, T), bool))
  np.testing.assert_allclose(logit(np.asarray(weights)[..., visible]) - logit(np.asarray(longer)[..., visible]),
                             np.log(4.0), rtol=1e-4)


def test_sigmoid_is_causal_and_drops_weights():
  """Changing the keys and values from position 4 on leaves the outputs before it unchanged; dropout changes them."""
  q, k, v, _ = inputs(2)
  later = (jnp.arange(T) >= 4)[None, :, None, None]
  call = jax.jit(lambda q, k, v: SIGMOID.fn(q, k, v, causal=True, sequence_length=N))
  out, moved = call(q, k, v), call(q, *(jnp.where(later, 5.0 + a, a) for a in (k, v)))
  np.testing.assert_array_equal(out[:, :4], moved[:, :4])
  assert np.abs(np.asarray(out[:, 4:] - moved[:, 4:])).min() > 0
  dropped = SIGMOID.fn(q, k, v, causal=True, dropout_rate=0.5, dropout_rng=jax.random.PRNGKey(3))
  assert np.isfinite(np.asarray(dropped)).all() and np.abs(np.asarray(dropped - out)).max() > 0.1
  with pytest.raises(ValueError, match="'sigmoid': dropout_rate > 0 needs a dropout_rng"):
    SIGMOID.fn(q, k, v, dropout_rate=0.5)
  with pytest.raises(ValueError, match="'sigmoid' needs a positive int sequence_length, got 0"):
    SIGMOID.fn(q, k, v, sequence_length=0)


@pytest.mark.integration  # a 2-layer LM compiled for generation: 8-24 s on 2 busy cores.
def test_sigmoid_layers_beside_softmax_layers_generate_as_the_full_forward():
  """A 2-layer LM of pattern (sigmoid, softmax), n = 16: cached generation equals the full forward pass."""
  check_cached_generation_equals_full_forward(*lm_and_params(**{
      "model.layer_kinds": {"sigmoid": {"attention": "sigmoid", "attention_options": {"sequence_length": N}},
                            "softmax": {"attention": "dot_product"}},
      "model.layer_pattern": ("sigmoid", "softmax")}))
