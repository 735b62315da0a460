"""Every registered attention variant against its reference, forward and gradients, in every setting the model uses.

The matrix is parametrized over the registry, so a new variant is checked without touching this file: softmax
variants against `dot_product`; `local` against `dot_product` with the sliding-window mask; `linear` (not
softmax) against its explicit quadratic formula. A variant is skipped for a setting only because it does not
declare a needed feature, and `test_undeclared_features_are_refused` checks that asking for one fails.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import attention
from jformer.ops import masks

BATCH, LENGTH, SOURCE_LENGTH, HEADS, DIM = 2, 9, 7, 2, 8
# Options that cut these small shapes into several blocks that do not divide the lengths.
OPTIONS = {"chunked": dict(query_chunk_size=4, key_chunk_size=3), "flash_pallas": dict(block_q=4, block_k=4),
           "linear": dict(chunk_size=4), "local": dict(window_size=3)}
PADDING = jnp.array([[1] * 6 + [0] * 3, [1] * 9])  # row 0: 6 tokens + padding
SOURCE_PADDING = jnp.array([[1] * 7, [1] * 4 + [0] * 3])
PACKED = jnp.array([[1, 1, 1, 2, 2, 2, 2, 3, 0], [1, 1, 1, 1, 1, 2, 2, 0, 0]])  # packed examples per row
PACKED_POSITIONS = jnp.array([[0, 1, 2, 0, 1, 2, 3, 0, 0], [0, 1, 2, 3, 4, 0, 1, 0, 0]])
PACKED_SOURCE = jnp.array([[1, 1, 2, 2, 2, 3, 3], [1, 1, 1, 2, 0, 0, 0]])


def random_qkv(seed: int, q_len=LENGTH, kv_len=LENGTH, heads=HEADS, kv_heads=HEADS):
  kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(kq, (BATCH, q_len, heads, DIM)), jax.random.normal(kk, (BATCH, kv_len, kv_heads, DIM)),
          jax.random.normal(kv, (BATCH, kv_len, kv_heads, DIM)))


@dataclasses.dataclass(frozen=True)
class Setting:
  """A way the model calls attention: the features it needs and its inputs (query, key, value, keyword args)."""
  needs: frozenset
  make: Callable[[], tuple]


SETTINGS = {
    "encoder_padding": Setting(frozenset({"segment_ids"}), lambda: (
        *random_qkv(0), dict(q_segment_ids=PADDING, kv_segment_ids=PADDING))),
    "decoder_causal": Setting(frozenset({"causal", "segment_ids"}), lambda: (
        *random_qkv(2), dict(causal=True, q_segment_ids=PADDING, kv_segment_ids=PADDING))),
    "cross_attention": Setting(frozenset({"segment_ids"}), lambda: (
        *random_qkv(3, kv_len=SOURCE_LENGTH), dict(q_segment_ids=PADDING, kv_segment_ids=SOURCE_PADDING))),
    "packed_encoder": Setting(frozenset({"segment_ids", "positions"}), lambda: (
        *random_qkv(5), dict(q_segment_ids=PACKED, kv_segment_ids=PACKED, q_positions=PACKED_POSITIONS,
                             kv_positions=PACKED_POSITIONS))),
    "packed_cross_attention": Setting(frozenset({"segment_ids"}), lambda: (
        *random_qkv(6, kv_len=SOURCE_LENGTH), dict(q_segment_ids=PACKED, kv_segment_ids=PACKED_SOURCE))),
    "grouped_query": Setting(frozenset({"causal", "gqa"}), lambda: (*random_qkv(7, heads=4, kv_heads=2),
                                                                    dict(causal=True))),
    "packed_decoder_multi_query": Setting(frozenset({"causal", "segment_ids", "positions", "gqa"}), lambda: (
        *random_qkv(8, heads=4, kv_heads=1), dict(causal=True, q_segment_ids=PACKED, kv_segment_ids=PACKED,
                                                  q_positions=PACKED_POSITIONS, kv_positions=PACKED_POSITIONS))),
    "bias": Setting(frozenset({"bias", "segment_ids"}), lambda: (
        *random_qkv(9), dict(q_segment_ids=PADDING, kv_segment_ids=PADDING,
                             bias=jax.random.normal(jax.random.PRNGKey(19), (1, HEADS, LENGTH, LENGTH))))),
    "bias_per_key_causal": Setting(frozenset({"bias", "causal"}), lambda: (
        *random_qkv(10), dict(causal=True, bias=jax.random.normal(jax.random.PRNGKey(20), (BATCH, 1, 1, LENGTH))))),
    "mask": Setting(frozenset({"mask"}), lambda: (*random_qkv(11, kv_len=SOURCE_LENGTH), dict(
        mask=jax.random.bernoulli(jax.random.PRNGKey(21), 0.6, (BATCH, 1, LENGTH, SOURCE_LENGTH))
        | (jnp.arange(SOURCE_LENGTH) == 0)))),
}


def softmax_reference(q, k, v, **kwargs):
  return attention.get("dot_product").fn(q, k, v, **kwargs)


def local_reference(q, k, v, **kwargs):
  """dot_product with the equivalent mask: the sliding window over the (default arange) positions."""
  q_positions = kwargs.get("q_positions", jnp.arange(q.shape[1]))
  kv_positions = kwargs.get("kv_positions", jnp.arange(k.shape[1]))
  window = masks.sliding_window_mask(q_positions, kv_positions, OPTIONS["local"]["window_size"],
                                     causal=kwargs.get("causal", False))
  return attention.get("dot_product").fn(q, k, v, **kwargs, mask=window)


def linear_reference(q, k, v, **kwargs):
  """The explicit formula: (phi(Q) phi(K)^T * M) V / rowsum(phi(Q) phi(K)^T * M), phi = elu + 1, M the mask."""
  k, v = (attention.repeat_kv(x, q.shape[2]) for x in (k, v))
  mask = masks.attention_mask(q.shape[1], k.shape[1], **kwargs)
  phi = lambda x: jax.nn.elu(x) + 1
  weights = jnp.einsum("bthd,bshd->bhts", phi(q), phi(k)) * (True if mask is None else mask)
  normaliser = jnp.einsum("bhts->bth", weights)
  return jnp.einsum("bhts,bshd->bthd", weights, v) / jnp.where(normaliser > 0, normaliser, 1.0)[..., None]


REFERENCES = {"linear": linear_reference, "local": local_reference}


def reference_of(name):
  """The explicit formula a variant is checked against: here, its own `reference=`, else softmax attention."""
  return REFERENCES.get(name) or attention.get(name).reference or softmax_reference


def visible_rows(q, k, kwargs) -> np.ndarray:
  """`[B, T]` bool: the queries that see at least one key (others have no defined output)."""
  mask = masks.attention_mask(q.shape[1], k.shape[1], **{n: x for n, x in kwargs.items() if n != "bias"})
  if mask is None:
    return np.ones(q.shape[:2], bool)
  return np.broadcast_to(np.asarray(mask).any((1, 3)), q.shape[:2])


def output_and_grads(fn, q, k, v, kwargs, rows):
  """`fn`'s output and the gradients of sum(out * cotangent) over the visible rows wrt q, k, v (and bias)."""
  cotangent = jax.random.normal(jax.random.PRNGKey(99), q.shape[:3] + v.shape[-1:]) * rows[:, :, None, None]
  differentiable = (q, k, v) + ((kwargs["bias"],) if "bias" in kwargs else ())

  def loss(q, k, v, *bias):
    out = fn(q, k, v, **(dict(kwargs, bias=bias[0]) if bias else kwargs))
    return jnp.sum(jnp.where(rows[:, :, None, None], out, 0.0) * cotangent), out

  grad_fn = jax.value_and_grad(loss, argnums=tuple(range(len(differentiable))), has_aux=True)
  (_, out), grads = jax.jit(grad_fn)(*differentiable)
  return np.asarray(out), grads


@functools.lru_cache(maxsize=None)
def reference_output_and_grads(reference, setting):
  """`output_and_grads` of a reference in a setting, computed once for all the variants that share it."""
  q, k, v, kwargs = SETTINGS[setting].make()
  return output_and_grads(reference, q, k, v, kwargs, visible_rows(q, k, kwargs))


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("name", attention.available())
def test_variant_matches_reference(name, setting):
  variant, case = attention.get(name), SETTINGS[setting]
  if not case.needs <= variant.supports:
    pytest.skip(f"'{name}' does not declare {sorted(case.needs - variant.supports)}")
  q, k, v, kwargs = case.make()
  rows = visible_rows(q, k, kwargs)
  out, grads = output_and_grads(functools.partial(variant.fn, **OPTIONS.get(name, {})), q, k, v, kwargs, rows)
  want_out, want_grads = reference_output_and_grads(reference_of(name), setting)
  assert out.shape == q.shape and np.isfinite(out).all()
  np.testing.assert_allclose(out[rows], want_out[rows], atol=1e-5)
  for argument, got, want in zip(("query", "key", "value", "bias"), grads, want_grads):
    np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"gradient wrt {argument}")


@pytest.mark.parametrize("name", attention.available())
def test_decode_steps_match_full_forward(name):
  """Step t: one query at position t against a cache of S slots, slots after t holding garbage (K < H heads)."""
  variant = attention.get(name)
  if not {"causal", "positions", "decode"} <= variant.supports:
    pytest.skip(f"'{name}' does not declare decode")
  slots = 6
  q, k, v = random_qkv(12, q_len=slots, kv_len=slots, heads=4, kv_heads=2)
  garbage = 100.0 * jax.random.normal(jax.random.PRNGKey(13), k.shape)
  fn = functools.partial(variant.fn, **OPTIONS.get(name, {}))
  filled = lambda x, t: jnp.where((jnp.arange(slots) <= t)[None, :, None, None], x, garbage)

  def decode(q, k, v):
    def step(t):  # one compiled step for all t
      return fn(jax.lax.dynamic_slice_in_dim(q, t, 1, axis=1), filled(k, t), filled(v, t), causal=True,
                q_positions=jnp.full((BATCH, 1), t), kv_positions=jnp.arange(slots)[None])[:, 0]

    return jnp.moveaxis(jax.lax.map(step, jnp.arange(slots)), 0, 1)

  rows = np.ones((BATCH, slots), bool)
  out, grads = output_and_grads(decode, q, k, v, {}, rows)
  want_out, want_grads = output_and_grads(reference_of(name), q, k, v, dict(causal=True), rows)
  np.testing.assert_allclose(out, want_out, atol=1e-5)
  for argument, got, want in zip(("query", "key", "value"), grads, want_grads):
    np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"gradient wrt {argument}")


@pytest.mark.parametrize("name", attention.available())
def test_undeclared_features_are_refused(name):
  """`check` refuses what a variant does not declare, and so does a call that asks for it."""
  variant = attention.get(name)
  undeclared = [s for s in SETTINGS.values() if not s.needs <= variant.supports]
  for case in undeclared:
    with pytest.raises(ValueError, match=f"attention variant '{name}' does not support"):
      variant.check(needs=case.needs)
    q, k, v, kwargs = case.make()
    with pytest.raises(ValueError, match=f"attention variant '{name}' does not support"):
      variant.fn(q, k, v, **kwargs, **OPTIONS.get(name, {}))
  if "dropout" not in variant.supports:
    with pytest.raises(ValueError, match=r"does not support \['dropout'\]"):
      variant.fn(*random_qkv(0), dropout_rate=0.1, dropout_rng=jax.random.PRNGKey(0), **OPTIONS.get(name, {}))
  assert variant.supports <= set(attention.FEATURES)


def test_every_variant_has_test_options_for_its_required_options():
  for name in attention.available():
    attention.get(name).check(options=OPTIONS.get(name, {}))


def test_local_is_banded_and_linear_is_not_softmax():
  """The two non-reference variants really differ from full softmax attention on the same inputs."""
  q, k, v = random_qkv(14)
  full, windowed, linear = jax.jit(lambda q, k, v: [attention.get(name).fn(q, k, v, causal=True, **OPTIONS.get(
      name, {})) for name in ("dot_product", "local", "linear")])(q, k, v)
  window = OPTIONS["local"]["window_size"]
  np.testing.assert_allclose(windowed[:, :window], full[:, :window], atol=1e-6)  # the window covers them all
  assert np.abs(np.asarray(windowed[:, window:] - full[:, window:])).max() > 0.1
  assert np.abs(np.asarray(linear - full)).max() > 0.1
  # Query 0 sees only key 0: every variant returns value 0.
  for out in (windowed, linear):
    np.testing.assert_allclose(out[:, 0], v[:, 0], atol=1e-6)


def test_sliding_window_mask_is_the_window():
  """The mask `local` is checked against, written out: |i - j| < 2, and 0 <= i - j < 2 when causal."""
  bidirectional = masks.sliding_window_mask(jnp.arange(4), jnp.arange(4), 2, causal=False)[0, 0]
  causal = masks.sliding_window_mask(jnp.arange(4), jnp.arange(4), 2, causal=True)[0, 0]
  np.testing.assert_array_equal(bidirectional, [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]])
  np.testing.assert_array_equal(causal, [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]])
