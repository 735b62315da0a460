"""`sink` (a learned sink logit per head in softmax's denominator: gpt-oss; Xiao et al. 2023) against the formula
written out here, outputs and gradients (the sink's included), with and without a window; its limits (no sink:
softmax attention, `local`'s with a window; a dominant sink: nothing); causality; in a layer pattern beside softmax
layers, windowed, cached generation equal to the full forward pass. tests/test_attention_variants.py checks it in
every masking it declares, decode steps included."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_equals_formula
from test_decode_generate import check_cached_generation_equals_full_forward, lm_and_params

from jformer import attention

SINK = attention.get("sink")
B, T, H, K, D = 2, 7, 4, 2, 8  # K = 2 key/value heads for H = 4 query heads.
PADDING = np.array([[1] * 5 + [0] * 2, [1] * 7])  # row 0: 5 tokens, then padding
CHUNKS = dict(query_chunk_size=3, key_chunk_size=2)  # several blocks, lengths not multiples of them


def dense_sink(q, k, v, sink, window_size):
  """out_i = sum_j e^(s_ij) v_j / (e^(sink_h) + sum_j e^(s_ij)), s = q . k / sqrt(d), over the visible keys: same
  segment, j <= i, and i - j < window_size when given; written out, key/value head h // (H / K)."""
  k, v = (jnp.repeat(a, H // K, axis=2) for a in (k, v))
  logits = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(D)
  i, j = np.arange(T)[:, None], np.arange(T)[None, :]
  visible = (PADDING[:, :, None] == PADDING[:, None, :]) & (PADDING[:, None, :] != 0) & (j <= i)
  if window_size is not None:
    visible = visible & (i - j < window_size)
  top = jnp.maximum(jnp.max(jnp.where(visible[:, None], logits, -np.inf), -1, keepdims=True), sink[:, None, None])
  exp = jnp.where(visible[:, None], jnp.exp(logits - top), 0.0)
  denominator = jnp.exp(sink[:, None, None] - top) + exp.sum(-1, keepdims=True)
  return jnp.einsum("bhts,bshd->bthd", exp / denominator, v)


def sink_call(q, k, v, sink, window_size):
  return SINK.fn(q, k, v, causal=True, q_segment_ids=PADDING, kv_segment_ids=PADDING, params={"sink": sink},
                 window_size=window_size, **CHUNKS)


def inputs(seed: int):
  keys = jax.random.split(jax.random.PRNGKey(seed), 4)
  return (jax.random.normal(keys[0], (B, T, H, D)), jax.random.normal(keys[1], (B, T, K, D)),
          jax.random.normal(keys[2], (B, T, K, D)), jax.random.normal(keys[3], (H,)))


@pytest.mark.parametrize("window_size", [None, 3])
def test_sink_is_the_formula_outputs_and_gradients(window_size):
  """Outputs and the gradients wrt Q, K, V and the sink logits equal the formula's (float32), causal with padding."""
  args = inputs(0)
  cotangent = jax.random.normal(jax.random.PRNGKey(9), (B, T, H, D)) * (PADDING != 0)[:, :, None, None]
  got_grads = assert_equals_formula(functools.partial(sink_call, window_size=window_size),
                                    functools.partial(dense_sink, window_size=window_size), args, cotangent,
                                    ("query", "key", "value", "sink"))
  assert np.abs(np.asarray(got_grads[3])).min() > 1e-4  # every head's sink learns


def test_without_a_sink_it_is_softmax_attention_and_a_dominant_sink_takes_everything():
  """sink_h -> -inf: softmax attention (`local`'s with a window); sink_h -> +inf: outputs -> 0; a padding query
  (it sees no key): 0."""
  q, k, v, _ = inputs(1)
  call = lambda sink, **options: SINK.fn(q, k, v, causal=True, params={"sink": jnp.full((H,), sink)}, **CHUNKS,
                                         **options)
  none, windowed, dominant, padded = jax.jit(lambda: (  # one program: cheaper than the engine run eagerly.
      call(-1e4), call(-1e4, window_size=3), call(30.0),
      SINK.fn(q, k, v, q_segment_ids=PADDING, kv_segment_ids=PADDING, params={"sink": jnp.zeros(H)})))()
  np.testing.assert_allclose(none, attention.get("dot_product").fn(q, k, v, causal=True), atol=1e-6)
  np.testing.assert_allclose(windowed, attention.get("local").fn(q, k, v, causal=True, window_size=3), atol=1e-6)
  assert np.abs(np.asarray(dominant)).max() < 1e-10
  np.testing.assert_array_equal(padded[0, 5:], 0.0)
  with pytest.raises(ValueError, match=r"'sink' needs a positive int window_size, or None for no window, got 0"):
    call(0.0, window_size=0)


def test_sink_is_causal():
  """Changing the keys and values from position 4 on leaves the outputs before it unchanged."""
  q, k, v, sink = inputs(2)
  later = (jnp.arange(T) >= 4)[None, :, None, None]
  call = jax.jit(lambda q, k, v: SINK.fn(q, k, v, causal=True, params={"sink": sink}, **CHUNKS))
  out, moved = call(q, k, v), call(q, *(jnp.where(later, 5.0 + a, a) for a in (k, v)))
  np.testing.assert_array_equal(out[:, :4], moved[:, :4])
  assert np.abs(np.asarray(out[:, 4:] - moved[:, 4:])).min() > 0


@pytest.mark.integration  # a 2-layer LM compiled for generation: 8-24 s on 2 busy cores.
def test_windowed_sink_layers_beside_softmax_layers_generate_as_the_full_forward():
  """A 2-layer LM of pattern (sink with a window of 3, softmax), gpt-oss's alternation: a sink logit per head in the
  sink layer only, and cached generation equal to the full forward pass."""
  model, params = lm_and_params(**{
      "model.layer_kinds": {"sink": {"attention": "sink", "attention_options": {"window_size": 3}},
                            "softmax": {"attention": "dot_product"}},
      "model.layer_pattern": ("sink", "softmax")})
  assert params["decoder"]["layer_0"]["self_attention"]["sink"]["sink"].shape == (4,)
  assert "sink" not in params["decoder"]["layer_1"]["self_attention"]
  check_cached_generation_equals_full_forward(model, params)
