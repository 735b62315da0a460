"""`gated_deltanet` (Gated DeltaNet, Yang, Kautz and Hatamizadeh 2024) against the paper's recurrence written out
here, S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t, as a plain loop over t (numpy
in float64 for the outputs, the same loop in jnp for the gradients); its chunked form against its own token-by-token
recurrence; causality; its decode state in a language model beside a softmax layer. The generic variant tests
(tests/test_attention_variants.py) check it against its reference in every masking it declares, and its decode
steps against a cache."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_decode_generate import check_cached_generation_equals_full_forward, lm_and_params
from test_decode_state import cache_bytes

from jformer import attention, registry
from jformer.attention import gated_deltanet as gdn

B, T, H, DK, DV = 2, 11, 2, 4, 3
# Row 0: three packed examples (the second across the boundary of chunks of 4) and padding; row 1: one example.
SEGMENTS = np.array([[1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 0], [1] * T])
VARIANT = attention.get("gated_deltanet")


def random_inputs(seed=0):
  """(q, k, v, params, captures): random, not initial, parameters (the gate maps use a_log and dt_bias) and gate
  logits (the keys' side; the queries' side is not read)."""
  keys = jax.random.split(jax.random.PRNGKey(seed), 8)
  q, k = (jax.random.normal(key, (B, T, H, DK)) for key in keys[:2])
  v = jax.random.normal(keys[2], (B, T, H, DV))
  params = {"alpha_weight": jnp.zeros((H * DK, H)), "beta_weight": jnp.zeros((H * DK, H)),
            "a_log": 0.5 * jax.random.normal(keys[3], (H,)), "dt_bias": jax.random.normal(keys[4], (H,))}
  logits = {"alpha_logit": jax.random.normal(keys[5], (B, T, H)),
            "beta_logit": 2 * jax.random.normal(keys[6], (B, T, H))}
  return q, k, v, params, {"q": logits, "kv": logits}


def paper_recurrence(xp, q, k, v, a_log, dt_bias, alpha_logit, beta_logit, segments):
  """The paper's recurrence, one token at a time with the state S `[B, H, Dv, Dk]`, in array module `xp` (numpy or
  jax.numpy): alpha_t = exp(-exp(a_log) softplus(x W_a + dt_bias)), beta_t = sigmoid(x W_b) (the logits given),
  q and k L2-normalised; S restarts at 0 where the segment id changes; padding (id 0) outputs 0."""
  unit = lambda x: x / xp.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)
  q, k = unit(q), unit(k)
  alpha = xp.exp(-xp.exp(a_log) * xp.logaddexp(0.0, alpha_logit + dt_bias))
  beta = 1 / (1 + xp.exp(-beta_logit))
  state, outs = xp.zeros((B, H, DV, DK)), []
  for t in range(T):
    if t:
      state = state * (segments[:, t] == segments[:, t - 1])[:, None, None, None]
    a, b, kt = alpha[:, t, :, None, None], beta[:, t, :, None, None], k[:, t]
    state = a * xp.matmul(state, xp.eye(DK) - b * kt[..., :, None] * kt[..., None, :]) + b * v[:, t, :, :, None] * kt[
        ..., None, :]
    outs.append(xp.matmul(state, q[:, t, :, :, None])[..., 0] * (segments[:, t] != 0)[:, None, None])
  return xp.stack(outs, axis=1)


def paper_in_numpy(q, k, v, params, captures, segments):
  as64 = lambda x: np.asarray(x, np.float64)
  return paper_recurrence(np, *map(as64, (q, k, v, params["a_log"], params["dt_bias"],
                                          captures["kv"]["alpha_logit"], captures["kv"]["beta_logit"])), segments)


def variant(q, k, v, params, captures, segments=None, chunk_size=4):
  ids = None if segments is None else jnp.asarray(segments)
  return VARIANT.fn(q, k, v, params=params, captures=captures, causal=True, q_segment_ids=ids, kv_segment_ids=ids,
                    chunk_size=chunk_size)


def grads(fn, q, k, v, params, captures, rows):
  """Gradients of sum(out * cotangent) over `rows` wrt q, k, v, a_log, dt_bias and the keys' gate logits."""
  cotangent = jax.random.normal(jax.random.PRNGKey(9), (B, T, H, DV)) * rows[..., None, None]
  loss = lambda q, k, v, p, c: jnp.sum(fn(q, k, v, p, c) * cotangent)
  got = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))(q, k, v, params, captures)
  return got[:3] + ({n: got[3][n] for n in ("a_log", "dt_bias")}, got[4]["kv"])


def assert_trees_close(got, want, atol=1e-5):
  jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, atol=atol, rtol=1e-5), got, want)


@pytest.mark.parametrize("segments", [None, SEGMENTS], ids=["one_example", "packed"])
def test_outputs_and_gradients_equal_the_papers_recurrence(segments):
  q, k, v, params, captures = random_inputs()
  ids = np.ones((B, T), int) if segments is None else segments
  out = jax.jit(variant, static_argnames="chunk_size")(q, k, v, params, captures, segments)
  np.testing.assert_allclose(out, paper_in_numpy(q, k, v, params, captures, ids), atol=1e-5)

  def loop(q, k, v, p, c):
    return paper_recurrence(jnp, q, k, v, p["a_log"], p["dt_bias"], c["kv"]["alpha_logit"], c["kv"]["beta_logit"],
                            jnp.asarray(ids))

  rows = ids != 0
  assert_trees_close(grads(functools.partial(variant, segments=segments), q, k, v, params, captures, rows),
                     grads(loop, q, k, v, params, captures, rows))


@pytest.mark.parametrize("chunk_size", [1, 16])
def test_chunked_form_equals_the_recurrence_outputs_and_gradients(chunk_size):
  """The chunked form (chunks of 1; one chunk, 16 > T; chunks of 4, not dividing T, above) against the token-by-token
  recurrence: the decode step from an empty state over the whole row, and, on packed rows, the reference."""
  q, k, v, params, captures = random_inputs(1)
  rows = np.ones((B, T), bool)

  def recurrence(q, k, v, p, c):
    return gdn.decode_step(gdn.decode_init(B, H, DK, DV), q, k, v, params=p, captures=c)[0]

  chunked = functools.partial(variant, chunk_size=chunk_size)
  np.testing.assert_allclose(chunked(q, k, v, params, captures), recurrence(q, k, v, params, captures), atol=1e-5)
  assert_trees_close(grads(chunked, q, k, v, params, captures, rows), grads(recurrence, q, k, v, params, captures,
                                                                            rows))
  packed = functools.partial(variant, segments=SEGMENTS, chunk_size=chunk_size)
  reference = lambda q, k, v, p, c: VARIANT.reference(q, k, v, params=p, captures=c, causal=True,
                                                      q_segment_ids=SEGMENTS, kv_segment_ids=SEGMENTS)
  rows = SEGMENTS != 0
  np.testing.assert_allclose(packed(q, k, v, params, captures)[rows], reference(q, k, v, params, captures)[rows],
                             atol=1e-5)
  assert_trees_close(grads(packed, q, k, v, params, captures, rows), grads(reference, q, k, v, params, captures,
                                                                           rows))


def test_causal_a_token_changes_only_the_outputs_from_its_own_on():
  q, k, v, params, captures = random_inputs(2)
  bump = lambda x: x.at[:, 6].add(1.0)
  changed = variant(bump(q), bump(k), bump(v), params, jax.tree.map(bump, captures))
  out = variant(q, k, v, params, captures)
  np.testing.assert_allclose(changed[:, :6], out[:, :6], atol=1e-6)
  assert np.abs(np.asarray(changed[:, 6:] - out[:, 6:])).min(axis=(0, 2, 3)).max() > 1e-3


def test_initial_gates_are_mamba2s_and_bad_calls_are_refused():
  params = registry.init_params(gdn.PARAMS, dict(heads=64, d_model=8), jax.random.PRNGKey(0))
  assert np.all((np.exp(params["a_log"]) >= 1) & (np.exp(params["a_log"]) <= 16))
  dt = jax.nn.softplus(params["dt_bias"])
  assert np.all((dt >= 0.999e-3) & (dt <= 1.001e-1)), dt
  q, k, v, params, captures = random_inputs()
  with pytest.raises(ValueError, match=r"'gated_deltanet' needs captures=.*\['alpha_logit', 'beta_logit'\]"):
    VARIANT.fn(q, k, v, params=params, captures={"q": {}, "kv": {}}, causal=True)
  with pytest.raises(ValueError, match=r"'gated_deltanet' needs a positive int chunk_size, got 0"):
    variant(q, k, v, params, captures, chunk_size=0)


@pytest.mark.integration  # a 2-layer LM compiled for generation: 8-24 s on 2 busy cores.
def test_in_a_layer_pattern_cached_generation_equals_the_full_forward_and_the_state_is_flat():
  """A 2-layer LM of pattern (gated_deltanet, softmax): generation from the cache (the gated delta state, keys and
  values of the softmax layer) equals the full forward pass; a model of gated_deltanet layers only keeps a decode
  state whose size does not depend on the decode length."""
  kinds = {"gdn": {"attention": "gated_deltanet", "attention_options": {"chunk_size": 4}},
           "softmax": {"attention": "dot_product"}}
  check_cached_generation_equals_full_forward(*lm_and_params(**{"model.layer_kinds": kinds,
                                                                "model.layer_pattern": ("gdn", "softmax")}))
  model, params = lm_and_params(**{"model.attention": "gated_deltanet", "model.max_length": 64})
  assert cache_bytes(model, params, 16) == cache_bytes(model, params, 64)
