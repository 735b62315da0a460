"""`stick_breaking` (Tan et al. 2024, Scaling Stick-Breaking Attention) against the paper's equation written out here
as products (not in log space), outputs and gradients, with and without the query's own key; causal; refused where
keys have no order (an encoder); an LM with a stick-breaking layer beside a softmax one and no positional encoding
generates from its cache what its full pass predicts; over a sequence split across devices (slow run), as on one. The
generic matrix (tests/test_attention_variants.py) checks it against its weights in every causal masking it declares,
and its decode steps against the full forward."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_context_parallel import output_and_grads, placement, problem, shardings
from test_decode_generate import check_cached_generation_equals_full_forward, lm_and_params

from helpers import SMALL
from jformer import attention
from jformer import config as config_lib

B, T, H, D = 2, 8, 2, 8
SEGMENTS = np.array([[1, 1, 1, 2, 2, 2, 2, 0], [1] * T])  # row 0: two packed examples and padding
POSITIONS = np.array([[0, 1, 2, 0, 1, 2, 3, 0], list(range(T))])


def inputs(seed=0):
  return tuple(jax.random.normal(key, (B, T, H, D)) for key in jax.random.split(jax.random.PRNGKey(seed), 3))


def paper_attention(q, k, v, visible):
  """o_i = sum_j A_ij v_j, A_ij = beta_ij prod_{visible k after j} (1 - beta_ik), beta = sigmoid(q.k / sqrt(d)):
  the product itself, over a `[B, H, T, S, S]` array of factors (the keys k on the last axis)."""
  beta = jax.nn.sigmoid(jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D))
  after_j = np.arange(T)[None, :] > np.arange(T)[:, None]  # [j, k]: key k comes after key j
  factors = jnp.where(visible[:, None, :, None, :] & after_j, 1.0 - beta[:, :, :, None, :], 1.0)
  weights = jnp.where(visible[:, None], beta * jnp.prod(factors, axis=-1), 0.0)
  return jnp.einsum("bhts,bshd->bthd", weights, v)


@pytest.mark.parametrize("attend_current", [False, True])
def test_stick_breaking_is_the_papers_equation_with_its_gradients(attend_current):
  """Packed rows with their positions: key j is visible to query i in the same example (segment id != 0) when
  position(j) < position(i) (the paper), or <= with attend_current; outputs and gradients wrt q, k and v."""
  q, k, v = inputs()
  same = (SEGMENTS[:, :, None] == SEGMENTS[:, None, :]) & (SEGMENTS[:, None, :] != 0)
  before = POSITIONS[:, None, :] <= POSITIONS[:, :, None] if attend_current else (
      POSITIONS[:, None, :] < POSITIONS[:, :, None])
  real = SEGMENTS != 0
  cotangent = jax.random.normal(jax.random.PRNGKey(9), (B, T, H, D)) * real[:, :, None, None]
  ids, positions = jnp.asarray(SEGMENTS), jnp.asarray(POSITIONS)

  def variant(q, k, v):
    return attention.get("stick_breaking").fn(q, k, v, causal=True, q_segment_ids=ids, kv_segment_ids=ids,
                                              q_positions=positions, kv_positions=positions,
                                              attend_current=attend_current)

  def out_and_grads(fn):
    loss = lambda *args: (jnp.sum(jnp.where(real[:, :, None, None], fn(*args), 0.0) * cotangent), fn(*args))
    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    return np.asarray(out)[real], grads

  (got, got_grads), (want, want_grads) = out_and_grads(variant), out_and_grads(
      lambda q, k, v: paper_attention(q, k, v, same & before))
  np.testing.assert_allclose(got, want, atol=1e-5)
  for got_grad, want_grad in zip(got_grads, want_grads, strict=True):
    np.testing.assert_allclose(got_grad, want_grad, atol=1e-5)
  first = POSITIONS[real] == 0  # the first token of each example
  assert (np.abs(got[first]) > 0).all() if attend_current else (got[first] == 0).all()


def test_stick_breaking_is_causal_and_recent_keys_break_first():
  """A later key or value changed leaves the earlier outputs as they were, and moves the later ones. With every
  beta = 1/2 (zero logits) each key back gets half the stick left: A_ij = 2^-(i - j), j < i."""
  zeros = jnp.zeros((1, 4, 1, D))
  np.testing.assert_allclose(attention.get("stick_breaking").weights(zeros, zeros, causal=True)[0, 0],
                             [[0, 0, 0, 0], [1 / 2, 0, 0, 0], [1 / 4, 1 / 2, 0, 0], [1 / 8, 1 / 4, 1 / 2, 0]])
  q, k, v = inputs(1)
  fn = jax.jit(lambda q, k, v: attention.get("stick_breaking").fn(q, k, v, causal=True))
  t = 5
  changed, base = fn(q, k.at[:, t].add(1.0), v.at[:, t].add(1.0)), fn(q, k, v)
  np.testing.assert_allclose(changed[:, :t + 1], base[:, :t + 1], atol=1e-6)  # query t sees keys before t only
  assert np.abs(np.asarray(changed[:, t + 1:] - base[:, t + 1:])).max() > 1e-2


def test_calls_without_an_order_are_refused():
  """No causal masking (an encoder, cross-attention): refused by the call, and by the config of a translation model
  before anything runs; a bad attend_current too."""
  q, k, v = inputs()
  variant = attention.get("stick_breaking")
  with pytest.raises(ValueError, match="stick-breaking attention is causal"):
    variant.fn(q, k, v)
  with pytest.raises(ValueError, match="attend_current must be True or False, got 'yes'"):
    variant.fn(q, k, v, causal=True, attend_current="yes")
  with pytest.raises(ValueError, match="cannot run the model's encoder self-attention: stick-breaking attention is"):
    config_lib.load(SMALL, {"model.attention": "stick_breaking"})


@pytest.mark.integration  # a 2-layer LM compiled for generation: 8-24 s on 2 busy cores.
def test_a_stick_breaking_layer_beside_a_softmax_layer_generates_from_its_cache():
  """A 2-layer LM (4 query heads on 2 key/value heads) of pattern (stick_breaking, softmax), without a positional
  encoding (the paper's setting): the stick-breaking layer gives the stack its order."""
  kinds = {"stick_breaking": {"attention": "stick_breaking"}, "softmax": {"attention": "dot_product"}}
  check_cached_generation_equals_full_forward(*lm_and_params(**{
      "model.layer_kinds": kinds, "model.layer_pattern": ("stick_breaking", "softmax"), "model.positional": "none"}))


@pytest.mark.slow
def test_stick_breaking_over_a_sequence_split_equals_one_device():
  """Rows split over 4 devices along the sequence (2 rows over data), packed, causal, grouped heads: the registry runs
  it on the gathered keys (`parallel.context_strategy='gather'`; the ring computes softmax attention only), outputs
  and gradients as on one device."""
  args, mesh = problem(), placement("gather", data=2, sequence=4)
  want_out, want_grads = jax.jit(output_and_grads("stick_breaking", {}, dict(causal=True)))(*args)
  out, grads = jax.jit(output_and_grads("stick_breaking", {}, dict(causal=True), mesh),
                       in_shardings=shardings(mesh.mesh))(*args)
  assert out.sharding.spec[1] == "sequence"  # each device keeps its share of the tokens
  rows = np.asarray(args[3] != 0)
  np.testing.assert_allclose(np.asarray(out)[rows], np.asarray(want_out)[rows], atol=2e-6)
  for got, want in zip(grads, want_grads, strict=True):
    np.testing.assert_allclose(got, want, atol=2e-5)
