"""`differential` (Ye et al. 2024, Differential Transformer) against the paper's equation written out here, outputs
and gradients; causal; dropout of the differential map; lambda_init's depth schedule as layer kinds; an LM with a
differential layer beside a softmax one generates from its cache what its full pass predicts; over a sequence split
across devices (slow run), as on one. The generic matrix (tests/test_attention_variants.py) checks its two `auto`
calls against its dense formula in every masking it declares, and its decode steps against the full forward."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_context_parallel import output_and_grads, placement, problem, shardings
from test_decode_generate import check_cached_generation_equals_full_forward, lm_and_params, lm_config

from jformer import attention, tasks
from jformer.attention import differential
from jformer.ops.dropout import dropout

B, T, H, K, D = 2, 8, 4, 2, 8  # query heads H, key/value heads K (grouped), head_dim D = 2d
SEGMENTS = np.array([[1, 1, 1, 2, 2, 2, 2, 0], [1] * T])  # row 0: two packed examples and padding
LAMBDA_INIT = 0.5


def inputs(seed=0):
  keys = jax.random.split(jax.random.PRNGKey(seed), 5)
  q, k, v = (jax.random.normal(key, shape) for key, shape in zip(keys, [(B, T, H, D), (B, T, K, D), (B, T, K, D)]))
  params = {"lambda_q": 0.5 * jax.random.normal(keys[3], (D,)), "lambda_k": 0.5 * jax.random.normal(keys[4], (D,))}
  return q, k, v, params


def visible_keys(segments):
  """`[B, T, S]` bool, written out: causal and in the same example (segment id != 0)."""
  same = (segments[:, :, None] == segments[:, None, :]) & (segments[:, None, :] != 0)
  return same & np.tril(np.ones((T, T), bool))[None]


def paper_map(q, k, lambda_q, lambda_k, visible):
  """softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d)) over the visible keys, `[B, H, T, S]`, with
  lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init (paper eq. 1-2)."""
  d = D // 2
  k = jnp.repeat(k, H // K, axis=2)

  def softmax(q_half, k_half):
    scores = jnp.exp(jnp.einsum("bthe,bshe->bhts", q_half, k_half) / math.sqrt(d)) * visible[:, None]
    total = scores.sum(-1, keepdims=True)
    return scores / jnp.where(total > 0, total, 1.0)  # padding sees no key: 0

  lam = jnp.exp(jnp.sum(lambda_q[:d] * lambda_k[:d])) - jnp.exp(jnp.sum(lambda_q[d:] * lambda_k[d:])) + LAMBDA_INIT
  return softmax(q[..., :d], k[..., :d]) - lam * softmax(q[..., d:], k[..., d:])


def paper_heads(weights, v):
  """(1 - lambda_init) RMSNorm(weights V) per head (eps 1e-5, no scale), `[B, T, H, D]`."""
  o = jnp.einsum("bhts,bshe->bthe", weights, jnp.repeat(v, H // K, axis=2))
  return (1 - LAMBDA_INIT) * o / jnp.sqrt(jnp.mean(o * o, axis=-1, keepdims=True) + 1e-5)


def test_differential_is_the_papers_equation_with_its_gradients():
  """Packed rows (segment ids, causal by index), 4 query heads on 2 key/value heads, lambda_init 0.5: outputs and the
  gradients wrt queries, keys, values and both lambda vectors, on the tokens that see a key."""
  q, k, v, params = inputs()
  ids, real = jnp.asarray(SEGMENTS), SEGMENTS != 0
  cotangent = jax.random.normal(jax.random.PRNGKey(9), (B, T, H, D)) * real[:, :, None, None]

  def variant(q, k, v, params):
    return attention.get("differential").fn(q, k, v, params=params, causal=True, q_segment_ids=ids,
                                             kv_segment_ids=ids, lambda_init=LAMBDA_INIT)

  def paper(q, k, v, params):
    return paper_heads(paper_map(q, k, params["lambda_q"], params["lambda_k"], visible_keys(SEGMENTS)), v)

  def out_and_grads(fn):
    loss = lambda *args: (jnp.sum(jnp.where(real[:, :, None, None], fn(*args), 0.0) * cotangent), fn(*args))
    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(q, k, v, params)
    return np.asarray(out)[real], grads

  (got, got_grads), (want, want_grads) = out_and_grads(variant), out_and_grads(paper)
  np.testing.assert_allclose(got, want, atol=1e-5)
  for got_grad, want_grad in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads), strict=True):
    np.testing.assert_allclose(got_grad, want_grad, atol=1e-5)


def test_differential_is_causal_and_drops_out_its_differential_map():
  """A later key or value changed leaves the earlier outputs as they were; dropout zeroes the same entries of both
  maps, so the output is that of the dropped-out differential map (dropout is linear)."""
  q, k, v, params = inputs(1)
  fn = jax.jit(lambda q, k, v, rate: attention.get("differential").fn(
      q, k, v, params=params, causal=True, lambda_init=LAMBDA_INIT, dropout_rate=rate,
      dropout_rng=jax.random.PRNGKey(3)), static_argnums=3)
  t = 5
  changed = fn(q, k.at[:, t].add(1.0), v.at[:, t].add(1.0), 0.0)
  base = fn(q, k, v, 0.0)
  np.testing.assert_allclose(changed[:, :t], base[:, :t], atol=1e-6)
  assert np.abs(np.asarray(changed[:, t:] - base[:, t:])).max() > 1e-2
  weights = paper_map(q, k, params["lambda_q"], params["lambda_k"], np.tril(np.ones((T, T), bool))[None])
  want = paper_heads(dropout(weights, 0.5, jax.random.PRNGKey(3)), v)
  np.testing.assert_allclose(fn(q, k, v, 0.5), want, atol=1e-5)


def test_an_odd_head_dim_is_refused():
  q = jnp.ones((1, 4, 2, 5))
  params = {"lambda_q": jnp.zeros(5), "lambda_k": jnp.zeros(5)}
  with pytest.raises(ValueError, match="head_dim must be even, got 5"):
    attention.get("differential").fn(q, q, q, params=params, causal=True)


def test_lambda_init_follows_the_depth_schedule_as_layer_kinds():
  """lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1)): 0.2 at layer 1, towards 0.8 with depth; `depth_schedule` sets it in
  layer l - 1 of each stack (counted from 0) through `model.layer_kinds`."""
  assert differential.lambda_init_at(1) == pytest.approx(0.2)
  assert differential.lambda_init_at(2) == pytest.approx(0.8 - 0.6 * math.exp(-0.3))
  assert differential.lambda_init_at(40) == pytest.approx(0.8, abs=1e-5)
  with pytest.raises(ValueError, match="counts layers from 1"):
    differential.lambda_init_at(0)
  kinds, pattern = differential.depth_schedule(3)
  config = tasks.build_model(lm_config(**{"model.layer_kinds": kinds, "model.layer_pattern": pattern,
                                          "model.num_decoder_layers": 3})).config
  assert [config.layer_config(i).attention for i in range(3)] == ["differential"] * 3
  assert [dict(config.layer_config(i).attention_options)["lambda_init"] for i in range(3)] == pytest.approx(
      [differential.lambda_init_at(l) for l in (1, 2, 3)])


@pytest.mark.integration  # a 2-layer LM compiled for generation: 8-24 s on 2 busy cores.
def test_a_differential_layer_beside_a_softmax_layer_generates_from_its_cache():
  """A 2-layer LM (4 query heads on 2 key/value heads of 8 features) of pattern (differential, softmax)."""
  kinds = {"differential": {"attention": "differential", "attention_options": {"lambda_init": 0.2}},
           "softmax": {"attention": "dot_product"}}
  check_cached_generation_equals_full_forward(*lm_and_params(**{"model.layer_kinds": kinds,
                                                                 "model.layer_pattern": ("differential", "softmax")}))



@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["gather", "ring"])
def test_differential_over_a_sequence_split_equals_one_device(strategy):
  """Rows split over 4 devices along the sequence (2 rows over data), packed, causal, grouped heads: its two `auto`
  calls take the split (`splits_sequence`, as `local`), outputs and gradients as on one device."""
  args, mesh = problem(), placement(strategy, data=2, sequence=4)
  params = {"lambda_q": 0.5 * jax.random.normal(jax.random.PRNGKey(7), (D,)),
            "lambda_k": 0.5 * jax.random.normal(jax.random.PRNGKey(8), (D,))}
  split = output_and_grads("differential", {"params": params}, dict(causal=True), mesh)
  want_out, want_grads = jax.jit(output_and_grads("differential", {"params": params}, dict(causal=True)))(*args)
  out, grads = jax.jit(split, in_shardings=shardings(mesh.mesh))(*args)
  assert out.sharding.spec[1] == "sequence"  # each device keeps its share of the tokens
  rows = np.asarray(args[3] != 0)
  np.testing.assert_allclose(np.asarray(out)[rows], np.asarray(want_out)[rows], atol=2e-6)
  for got, want in zip(grads, want_grads, strict=True):
    np.testing.assert_allclose(got, want, atol=2e-5)
