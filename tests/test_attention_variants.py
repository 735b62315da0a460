"""Every registered attention variant against its reference, forward and gradients, in every setting the model uses.

The matrix is parametrized over the registry, so a new variant is checked without touching this file, with the
`example_options` it registered: each against its `reference` (by default its attention weights times the
values: softmax attention for the kernels, the windowed softmax for `local`, the normalised kernel for `linear`,
softmax over the learned score for `additive`/`general`/`cosine`), with random values for its declared
parameters, gradients wrt those parameters included. A variant is skipped for a setting only because it does
not declare a needed feature, and `test_undeclared_features_are_refused` checks that asking for one fails.
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


def options_of(name):
  """The variant's example options (they cut these small shapes into several blocks that do not divide the
  lengths) and, when it declares parameters, random values for them shaped for `heads` query heads."""
  variant = attention.get(name)
  return dict(variant.example_options)


def params_of(name, heads):
  """Random (not initial: e.g. `general` starts as the identity) values for the variant's declared parameters."""
  variant = attention.get(name)
  if not variant.params:
    return {}
  dims = dict(heads=heads, kv_heads=heads, head_dim=DIM, d_model=heads * DIM)
  shapes = variant.param_shapes(dims, variant.example_options)
  keys = jax.random.split(jax.random.PRNGKey(23), len(shapes))
  return {"params": {n: 0.5 * jax.random.normal(key, shapes[n]) for key, n in zip(keys, sorted(shapes))}}


def visible_rows(q, k, kwargs) -> np.ndarray:
  """`[B, T]` bool: the queries that see at least one key (others have no defined output)."""
  mask = masks.attention_mask(q.shape[1], k.shape[1], **{n: x for n, x in kwargs.items() if n not in ("bias", "params")})
  if mask is None:
    return np.ones(q.shape[:2], bool)
  return np.broadcast_to(np.asarray(mask).any((1, 3)), q.shape[:2])


def output_and_grads(fn, q, k, v, kwargs, rows):
  """`fn`'s output and the gradients of sum(out * cotangent) over the visible rows wrt q, k, v (and bias, and the
  variant's parameters)."""
  cotangent = jax.random.normal(jax.random.PRNGKey(99), q.shape[:3] + v.shape[-1:]) * rows[:, :, None, None]
  names = [n for n in ("bias", "params") if n in kwargs]
  differentiable = (q, k, v) + tuple(kwargs[n] for n in names)

  def loss(q, k, v, *extra):
    out = fn(q, k, v, **dict(kwargs, **dict(zip(names, extra))))
    return jnp.sum(jnp.where(rows[:, :, None, None], out, 0.0) * cotangent), out

  grad_fn = jax.value_and_grad(loss, argnums=tuple(range(len(differentiable))), has_aux=True)
  (_, out), grads = jax.jit(grad_fn)(*differentiable)
  return np.asarray(out), grads


def assert_grads_close(grads, want_grads, names):
  for argument, got, want in zip(names, grads, want_grads):
    (got_leaves, _), want_leaves = jax.tree_util.tree_flatten_with_path(got), jax.tree.leaves(want)
    for (path, g), w in zip(got_leaves, want_leaves, strict=True):
      np.testing.assert_allclose(g, w, atol=1e-5, err_msg=f"gradient wrt {argument}{jax.tree_util.keystr(path)}")


def skip_unless_runs_here(variant):
  """A kernel built for other backends runs here only if it has a Pallas interpreter (an `interpret` option)."""
  backend = jax.default_backend()
  if variant.platforms is not None and backend not in variant.platforms and "interpret" not in variant.options:
    pytest.skip(f"'{variant.name}' runs only on {sorted(variant.platforms)}, not on {backend}")


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("name", attention.available())
def test_variant_matches_reference(name, setting):
  variant, case = attention.get(name), SETTINGS[setting]
  if not case.needs <= variant.supports:
    pytest.skip(f"'{name}' does not declare {sorted(case.needs - variant.supports)}")
  skip_unless_runs_here(variant)
  q, k, v, kwargs = case.make()
  refusal = variant.refusal(q, k, v, **kwargs)
  if refusal:  # its `limits` (tests/test_attention_kernels.py checks which settings each kernel takes).
    pytest.skip(f"'{name}' refuses this call: {refusal}")
  kwargs = dict(kwargs, **params_of(name, q.shape[2]))
  rows = visible_rows(q, k, kwargs)
  options = options_of(name)
  out, grads = output_and_grads(functools.partial(variant.fn, **options), q, k, v, kwargs, rows)
  want_out, want_grads = output_and_grads(functools.partial(variant.reference, **options), q, k, v, kwargs, rows)
  assert out.shape == q.shape and np.isfinite(out).all()
  np.testing.assert_allclose(out[rows], want_out[rows], atol=1e-5)
  assert_grads_close(grads, want_grads, ("query", "key", "value") + tuple(n for n in ("bias", "params") if n in kwargs))


@pytest.mark.parametrize("name", attention.available())
def test_decode_steps_match_full_forward(name):
  """Step t: one query at position t against a cache of S slots, slots after t holding garbage (K < H heads)."""
  variant = attention.get(name)
  if not {"causal", "positions", "decode"} <= variant.supports:
    pytest.skip(f"'{name}' does not declare decode")
  skip_unless_runs_here(variant)
  slots = 6
  q, k, v = random_qkv(12, q_len=slots, kv_len=slots, heads=4, kv_heads=2)
  garbage = 100.0 * jax.random.normal(jax.random.PRNGKey(13), k.shape)
  extra = dict(options_of(name), **params_of(name, q.shape[2]))
  fn = functools.partial(variant.fn, **extra)
  filled = lambda x, t: jnp.where((jnp.arange(slots) <= t)[None, :, None, None], x, garbage)

  def decode(q, k, v):
    def step(t):  # one compiled step for all t
      return fn(jax.lax.dynamic_slice_in_dim(q, t, 1, axis=1), filled(k, t), filled(v, t), causal=True,
                q_positions=jnp.full((BATCH, 1), t), kv_positions=jnp.arange(slots)[None])[:, 0]

    return jnp.moveaxis(jax.lax.map(step, jnp.arange(slots)), 0, 1)

  rows = np.ones((BATCH, slots), bool)
  out, grads = output_and_grads(decode, q, k, v, {}, rows)
  want_out, want_grads = output_and_grads(functools.partial(variant.reference, **extra), q, k, v, dict(causal=True),
                                          rows)
  np.testing.assert_allclose(out, want_out, atol=1e-5)
  assert_grads_close(grads, want_grads, ("query", "key", "value"))


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
      variant.fn(q, k, v, **kwargs, **options_of(name), **params_of(name, q.shape[2]))
  if "dropout" not in variant.supports:
    with pytest.raises(ValueError, match=r"does not support \['dropout'\]"):
      variant.fn(*random_qkv(0), dropout_rate=0.1, dropout_rng=jax.random.PRNGKey(0), **options_of(name),
                 **params_of(name, HEADS))
  assert variant.supports <= set(attention.FEATURES)


def test_local_is_banded_and_linear_is_not_softmax():
  """The two non-reference variants really differ from full softmax attention on the same inputs."""
  q, k, v = random_qkv(14)
  full, windowed, linear = jax.jit(lambda q, k, v: [attention.get(name).fn(q, k, v, causal=True, **options_of(
      name)) for name in ("dot_product", "local", "linear")])(q, k, v)
  window = options_of("local")["window_size"]
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
