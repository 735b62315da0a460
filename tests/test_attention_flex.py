"""Flex attention (`jformer.attention.flex`): variants written as a score_mod and/or a mask_mod, on the blockwise
engine with its block mask.

- Re-expression: ALiBi, T5's relative bias, the soft-cap, the sliding window and prefix-LM written as flex mods
  (tests/plugins/flex_reexpressed.py) equal today's implementations, forward and gradients (parameters included), in
  the variant matrix's settings (padding, packing, causal, grouped heads, bias, mask, cross-attention) and in cached
  decoding; document masking written as a mask_mod over a capture equals segment ids.
- The plug-ins from papers (tests/plugins/): the Forgetting Transformer against its own equation, and both through
  the matrix and the model's cached decoding.
- The block mask: blocks computed, blocks masked, and the mask a constant of the program where the call masks by
  index; gradients the same bits run to run; lowering to the library kernels where the mods are theirs.
- A score_mod NaN only where the key is masked (issue 49): finite gradients in the engine, the dense formula and
  cached decoding, and in a language model's training steps (what is refused at load: tests/reliability/
  test_refused_at_load.py).

The default run checks a representative part (the settings that ask for most at once); the slow run all of it.
"""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import helpers as matrix
from test_decode_generate import lm_and_params

from jformer import attention
from jformer.attention import auto, blockwise, flex
from jformer.ops import masks, positional
from jformer.registry import Param, constant

REEXPRESSED = ("flex_alibi", "flex_relative", "flex_softcap", "flex_window", "flex_prefix_lm")
PAPERS = ("learned_alibi", "forgetting_transformer")
# The default run: a re-expression of each kind in one setting that asks for what it depends on (ALiBi's parameters
# and T5's one-sided buckets with causal packed rows and grouped heads; prefix-LM's absolute positions in packed rows;
# a window on top of the call's own), FoX's captures; the rest (and the soft-cap) in the slow run.
FAST = {("flex_alibi", "packed_decoder_multi_query"), ("flex_relative", "packed_decoder_multi_query"),
        ("flex_window", "window_decoder"), ("flex_prefix_lm", "packed_encoder"),
        ("forgetting_transformer", "packed_decoder_multi_query")}


def cases(names):
  for name in names:
    for setting in sorted(matrix.SETTINGS):
      yield pytest.param(name, setting, id=f"{name}-{setting}",
                         marks=() if (name, setting) in FAST else pytest.mark.slow)


@pytest.mark.parametrize("name, setting", list(cases(REEXPRESSED + PAPERS)))
def test_flex_variant_matches_todays_implementation(flex_plugins, name, setting):
  """A re-expression against today's implementation (its `reference=`); a paper's plug-in against its weights."""
  matrix.check_variant_matches_reference(name, setting)


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == "forgetting_transformer" else pytest.mark.slow)
                                  for n in REEXPRESSED + PAPERS])
def test_flex_decode_steps_match_the_full_forward(flex_plugins, name):
  """Each cached step sees its true position and the slots' (the garbage after the step is masked)."""
  matrix.check_decode_steps_match_full_forward(name)


def test_forgetting_transformer_is_its_equation_in_packed_rows_with_the_same_bits_each_run(flex_plugins):
  """FoX (Lin et al. 2025) written out: softmax_j(q_i . k_j / sqrt(d) + sum_{l=j+1}^{i} log f_l) v_j with f =
  sigmoid(x W + b) from the layer input, causal, in packed rows (the variant's capture sums over the whole row). The
  flex variant equals it, and so do the gradients wrt q, k, v and the gate's parameters (through the capture), which
  two runs give bit for bit."""
  variant = attention.get("forgetting_transformer")
  draw = lambda seed, shape, scale=1.0: scale * jax.random.normal(jax.random.PRNGKey(seed), shape)
  q, k, v = draw(0, (2, 9, 2, 8)), draw(1, (2, 9, 2, 8)), draw(2, (2, 9, 2, 8))
  x = draw(3, (2, 9, 16))
  params = {"forget_weight": draw(4, (16, 2), 0.5), "forget_bias": jnp.array([0.5, 2.0])}
  ids, rows = matrix.PACKED, np.asarray(matrix.PACKED != 0)
  cotangent = draw(5, (2, 9, 2, 8)) * rows[:, :, None, None]

  def flex_loss(q, k, v, params):
    c = variant.captures["log_forget"].values(x, params)
    out = variant.fn(q, k, v, causal=True, q_segment_ids=ids, kv_segment_ids=ids, params=params,
                     captures={"q": {"log_forget": c}, "kv": {"log_forget": c}}, query_chunk_size=4, key_chunk_size=3)
    return jnp.sum(out * cotangent), out

  def equation_loss(q, k, v, params):
    log_f = jax.nn.log_sigmoid(x @ params["forget_weight"] + params["forget_bias"])  # [B, L, H]
    i, j, l = np.arange(9)[:, None, None], np.arange(9)[None, :, None], np.arange(9)[None, None, :]
    decay = jnp.einsum("ijl,blh->bhij", ((j < l) & (l <= i)).astype(np.float32), log_f)
    visible = masks.attention_mask(9, 9, causal=True, q_segment_ids=ids, kv_segment_ids=ids)
    logits = jnp.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(8) + decay
    out = jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(jnp.where(visible, logits, -1e30), -1), v)
    return jnp.sum(out * cotangent), out

  grad = jax.jit(jax.grad(flex_loss, argnums=(0, 1, 2, 3), has_aux=True))
  (grads, out), (again, _) = grad(q, k, v, params), grad(q, k, v, params)
  want_grads, want = jax.grad(equation_loss, argnums=(0, 1, 2, 3), has_aux=True)(q, k, v, params)
  np.testing.assert_allclose(np.asarray(out)[rows], np.asarray(want)[rows], atol=1e-5)
  matrix.assert_grads_close(grads, want_grads, ("query", "key", "value", "params"))
  assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(again)))


@pytest.mark.parametrize("setting", ["packed_decoder_multi_query",
                                     pytest.param("packed_cross_attention", marks=pytest.mark.slow)])
def test_document_masking_as_a_mask_mod_over_a_capture_equals_segment_ids(scratch_registries, setting):
  """Document masking written as PyTorch's document mask, the ids a capture, equals today's segment ids (packed rows
  with padding, causal, one key/value head for four query heads; packed cross-attention), with gradients."""

  def document(b, h, q_idx, kv_idx, *, q, kv):
    return (q["document"] == kv["document"]) & (kv["document"] != 0)

  variant = flex.register("flex_document", mask_mod=document,
                          captures={"document": attention.Capture(lambda x, params: x[..., 0])})
  q, k, v, kwargs = matrix.SETTINGS[setting].make()
  segments = {name: kwargs.pop(name) for name in ("q_segment_ids", "kv_segment_ids")}
  documents = {"q": {"document": segments["q_segment_ids"].astype(jnp.float32)},
               "kv": {"document": segments["kv_segment_ids"].astype(jnp.float32)}}
  rows = matrix.visible_rows(q, k, dict(kwargs, **segments))
  out, grads = matrix.output_and_grads(functools.partial(variant.fn, query_chunk_size=4, key_chunk_size=3), q, k, v,
                                       dict(kwargs, captures=documents), rows)
  want, want_grads = matrix.output_and_grads(attention.get("dot_product").fn, q, k, v, dict(kwargs, **segments), rows,
                                             jit=False)
  np.testing.assert_allclose(out[rows], want[rows], atol=1e-5)
  matrix.assert_grads_close(grads[:3], want_grads, ("query", "key", "value"))


BLOCK, BLOCKS = 64, 8  # 512 tokens in 8 x 8 blocks


def causal(b, h, q_idx, kv_idx):
  return kv_idx <= q_idx


def window_63(b, h, q_idx, kv_idx):
  return (kv_idx <= q_idx) & (q_idx - kv_idx <= 63)


def prefix_lm_128(b, h, q_idx, kv_idx):
  return (kv_idx < 2 * BLOCK) | (kv_idx <= q_idx)


def everything(b, h, q_idx, kv_idx):
  return kv_idx >= 0


@pytest.mark.parametrize("mask_mod, segments, computed, masked", [
    (causal, False, 36, 8),  # 8 + 7 + ... + 1 blocks on or below the diagonal; the 8 on it are masked.
    pytest.param(window_63, False, 15, 15, marks=pytest.mark.slow),  # the diagonal and the block before it.
    (prefix_lm_128, False, 37, 6),  # 16 blocks of the prefix, 15 below the diagonal after it, 6 on it.
    pytest.param(everything, True, 21, 8, marks=pytest.mark.slow),  # causal and two documents of 5 and 3 blocks
])
def test_flex_computes_the_non_empty_blocks_and_masks_only_the_partial_ones(scratch_registries, mask_mod, segments,
                                                                            computed, masked):
  """The score_mod runs once per block computed, the mask_mod once per block masked, in the forward and again in the
  backward pass: the counts equal the blocks a dense mask leaves non-empty and partly empty (and the numbers
  written here). With segment ids (`causal=True` and two documents) the block mask is read at run time."""
  scored, masked_blocks = [], []

  def counted_score(score, b, h, q_idx, kv_idx):
    jax.debug.callback(lambda: scored.append(1))
    return score

  def counted_mask(b, h, q_idx, kv_idx):
    if kv_idx.shape[-1] == BLOCK:  # a block of the passes (not the block mask's evaluation over all keys)
      jax.debug.callback(lambda: masked_blocks.append(1))
    return mask_mod(b, h, q_idx, kv_idx)

  variant = flex.register("counted", score_mod=counted_score, mask_mod=counted_mask)
  length = BLOCK * BLOCKS
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, length, 1, 8)) for i in range(3))
  ids = jnp.where(jnp.arange(length) < 5 * BLOCK, 1, 2)[None] if segments else None
  masking = dict(causal=segments, q_segment_ids=ids, kv_segment_ids=ids)
  loss = lambda q: variant.fn(q, k, v, **masking, query_chunk_size=BLOCK, key_chunk_size=BLOCK).sum()
  step = jax.jit(jax.value_and_grad(loss)).lower(q).compile()
  scored.clear(), masked_blocks.clear()
  jax.block_until_ready(step(q))
  jax.effects_barrier()
  visible = np.asarray(mask_mod(0, 0, np.arange(length)[:, None], np.arange(length)[None]), bool)
  if segments:
    visible = visible & np.asarray(masks.attention_mask(length, length, **masking)[0, 0])
  per_block = visible.reshape(BLOCKS, BLOCK, BLOCKS, BLOCK).swapaxes(1, 2).reshape(BLOCKS, BLOCKS, -1)
  assert (per_block.any(-1).sum(), (per_block.any(-1) & ~per_block.all(-1)).sum()) == (computed, masked)
  assert (len(scored), len(masked_blocks)) == (2 * computed, 2 * masked)


def test_the_block_mask_is_exact_for_packed_rows_masked_by_index_and_a_constant_where_it_can_be():
  """Per-chunk ranges of segment ids and positions class blocks exactly for packed rows masked by index (contiguous
  examples then padding, as the model trains), causal or windowed; where positions restart in each example, or ids
  come in any order, a block called EMPTY is empty and one called FULL is full. Without segment ids or positions,
  a mask_mod of the indices gives a constant block mask (computed when the program is built)."""
  rng = np.random.default_rng(0)
  cq, ck, length = 4, 3, 24
  index = np.arange(length)[None].repeat(2, 0)
  for window, order, by_index in (((5, 2), "packed", True), (None, "packed", True), (None, "packed", False),
                                  ((5, 2), "any", True)):
    ids = np.sort(rng.integers(0, 4, (2, length)), axis=1)[:, ::-1].copy()  # packed examples, then padding (0)
    ids = ids if order == "packed" else rng.permuted(ids, axis=1)
    positions = index if by_index else np.stack([_positions_in_examples(row) for row in ids])
    visibility = blockwise.Visibility(*(jnp.asarray(x) for x in (ids, ids, positions, positions)))
    kinds = np.asarray(blockwise.block_kinds(blockwise.Blocks(cq, ck, causal=True, window=window), visibility, None,
                                             None, blockwise.Captured({}, {}), query_shape=(2, length, 1, 1),
                                             key_shape=(2, length, 1, 1)))
    visible = np.asarray(masks.visible_keys(ids, ids, positions, positions, causal=True, window=window))
    per_block = visible.reshape(2, length // cq, cq, length // ck, ck).transpose(1, 3, 0, 2, 4).reshape(
        length // cq, length // ck, -1)
    empty, full = ~per_block.any(-1), per_block.all(-1)
    assert np.all(empty[kinds == blockwise.EMPTY]) and np.all(full[kinds == blockwise.FULL])
    if order == "packed" and by_index:
      np.testing.assert_array_equal(kinds, np.where(empty, blockwise.EMPTY, np.where(full, blockwise.FULL,
                                                                                     blockwise.PARTIAL)))
  seen = []

  @jax.jit
  def traced(ids):
    with jax.ensure_compile_time_eval():  # as `blockwise.attention` makes what the call does not give
      by_index = blockwise.Visibility(*(jnp.ones((1, length), jnp.int32),) * 2, *(jnp.arange(length)[None],) * 2)
    mods = blockwise.Mods(mask_mod=lambda b, h, q_idx, kv_idx, *_: q_idx >= kv_idx, mask_reads_indices=True)
    for visibility in (by_index, by_index._replace(q_segment_ids=ids, kv_segment_ids=ids)):
      seen.append(blockwise.block_kinds(blockwise.Blocks(cq, ck, causal=False, mods=mods), visibility, None, None,
                                        blockwise.Captured({}, {}), query_shape=(1, length, 1, 1),
                                        key_shape=(1, length, 1, 1)))
    return ids

  traced(jnp.ones((1, length), jnp.int32))
  assert not isinstance(seen[0], jax.core.Tracer) and isinstance(seen[1], jax.core.Tracer)
  # Queries 0-3 see keys of the first two chunks (0-2, 3-5).
  assert np.asarray(seen[0]).tolist()[0] == [blockwise.PARTIAL] * 2 + [blockwise.EMPTY] * 6


def _positions_in_examples(ids_L):
  """Each token's position in its own example: counting from 0 where the id changes."""
  starts = np.r_[True, ids_L[1:] != ids_L[:-1]]
  index = np.arange(len(ids_L))
  return index - np.maximum.accumulate(np.where(starts, index, 0))


def within_20(b, h, q_idx, kv_idx):
  return q_idx - kv_idx <= 20


def test_library_masks_are_autos_call_and_functions_run_on_the_engine_each_logged_once(scratch_registries,
                                                                                       monkeypatch, caplog):
  """On a (pretended) TPU: a variant of the library's masks and soft-cap is `auto`'s call, which hands it to splash
  (interpreted here) as its causal mask, window and soft-cap; the same window written as a function runs on the
  engine, the reason logged once however often it is traced; so does the library soft-cap on top of the model's
  (two soft-caps). Each equals today's implementation."""
  monkeypatch.setattr(auto, "_backend", lambda: "tpu")
  monkeypatch.setattr(auto, "_LOGGED", set())
  caplog.set_level(logging.INFO, logger="absl")
  library = flex.register("flex_library", mask_mod=flex.and_masks(flex.CAUSAL, flex.sliding_window(20)),
                          score_mod=flex.softcap(2.0))
  own = flex.register("flex_own", mask_mod=flex.and_masks(flex.CAUSAL, within_20))
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (2, 128, 2, 8)) for i in range(3))
  ids = jnp.array([[1] * 100 + [0] * 28, [1] * 128])
  masking, rows = dict(q_segment_ids=ids, kv_segment_ids=ids), np.asarray(ids, bool)
  dot_product = functools.partial(attention.get("dot_product").fn, q, k, v, causal=True, window=(20, 0), **masking)
  np.testing.assert_allclose(np.asarray(library.fn(q, k, v, **masking))[rows],
                             np.asarray(dot_product(logits_softcap=2.0))[rows], atol=1e-5)
  for _ in range(2):
    got = jax.jit(lambda q: own.fn(q, k, v, **masking))(q)
  np.testing.assert_allclose(np.asarray(got)[rows], np.asarray(dot_product())[rows], atol=1e-5)
  jax.eval_shape(lambda: library.fn(q, k, v, logits_softcap=3.0, **masking))
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("attention '")]
  assert lines == [
      "attention 'auto' on tpu, float32, T=128 S=128 H=2 K=2 D=8, causal+segment_ids+softcap+window: splash",
      "attention 'flex_own' (flex) on tpu, T=128 S=128: the blockwise engine; no library kernel takes its mask_mod "
      "within_20 (functions)",
      "attention 'flex_library' (flex) on tpu, T=128 S=128: the blockwise engine; no library kernel takes two "
      "soft-caps (the model's and its score_mod)"]


def test_a_registration_the_engine_cannot_read_is_refused_naming_the_fix(scratch_registries):
  with pytest.raises(ValueError, match="flex variant 'nothing' needs a score_mod or a mask_mod"):
    flex.register("nothing")
  with pytest.raises(ValueError, match=r"flex variant 'positional': late must take \(score, b, h, q_idx, kv_idx, "
                                       r"\*, \.\.\.\) with its other arguments keyword-only"):
    flex.register("positional", score_mod=late)
  with pytest.raises(ValueError, match="option 'size' has two defaults, 2 and 3; give it one"):
    flex.register("clash", score_mod=sized_score, mask_mod=sized_mask)
  with pytest.raises(ValueError, match="names an option 'window', a name the variant signature uses; rename it"):
    flex.register("reserved", mask_mod=named_window)
  with pytest.raises(ValueError, match="flex variant 'gate': its mods read each capture at the queries and at the"):
    flex.register("gate", score_mod=forget, captures={"c": attention.Capture(lambda x, p: x, queries_only=True)})
  variant = flex.register("captured", score_mod=forget, captures={"c": attention.Capture(lambda x, params: x[..., 0])})
  q, k, v = matrix.random_qkv(0)
  with pytest.raises(ValueError, match=r"attention variant 'captured': capture 'c' at the kv side must be float "
                                       r"\[2, 9\] or \[2, 9, 2\], got int32\[2, 9\]"):
    variant.fn(q, k, v, captures={"q": {"c": q[..., 0, 0]}, "kv": {"c": jnp.ones((2, 9), jnp.int32)}})
  with pytest.raises(ValueError, match=r"needs captures=\{'q': \{\.\.\.\}, 'kv': \{\.\.\.\}\} holding its declared "
                                       r"captures \['c'\]"):
    variant.fn(q, k, v)


def late(score, b, h, q_idx, kv_idx, late):
  return score


def sized_score(score, b, h, q_idx, kv_idx, *, size=2):
  return score


def sized_mask(b, h, q_idx, kv_idx, *, size=3):
  return q_idx >= size


def named_window(b, h, q_idx, kv_idx, *, window=3):
  return q_idx >= window


def forget(score, b, h, q_idx, kv_idx, *, q, kv):
  return score + q["c"] - kv["c"]


def test_flex_alibi_holds_a_fraction_of_the_memory_of_a_dense_bias(flex_plugins):
  """At 1,024 tokens the compiled forward and backward pass of ALiBi as a score_mod holds less than a third of the
  temporary memory of today's ALiBi on the same engine (its `[1, H, T, S]` bias given to `chunked`)."""
  length, slopes = 1024, jnp.array([0.5, 0.25])
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, length, 2, 16)) for i in range(3))
  positions = jnp.arange(length)[None]
  calls = {"flex": lambda q, p: attention.get("flex_alibi").fn(q, k, v, causal=True, params={"slopes": slopes},
                                                                q_positions=p, kv_positions=p),
           "chunked": lambda q, p: attention.get("chunked").fn(q, k, v, causal=True, q_positions=p, kv_positions=p,
                                                               bias=positional.alibi_bias(slopes, p, p, causal=True))}
  temp = {name: jax.jit(jax.grad(lambda q, p: call(q, p).sum())).lower(q, positions).compile().memory_analysis()
          .temp_size_in_bytes for name, call in calls.items()}
  assert temp["flex"] < temp["chunked"] / 3, temp


def log_distance(score, b, h, q_idx, kv_idx, *, params):
  """The logits minus s_h log(1 + i - j): finite where causal masking leaves the key visible, NaN past the query."""
  return score - params["slope"][h] * jnp.log(1 + (q_idx - kv_idx))


def log_distance_bias(slopes, q_positions, kv_positions):
  """The same term as a `[B, H, T, S]` bias, the distance clipped at 0 (where the key is masked)."""
  distance = jnp.maximum(q_positions[:, None, :, None] - kv_positions[:, None, None, :], 0)
  return -slopes[None, :, None, None] * jnp.log1p(distance.astype(jnp.float32))


def all_finite(tree) -> bool:
  return all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree.leaves(tree))


def test_a_mod_finite_only_where_the_key_is_visible_has_finite_gradients_on_every_path(scratch_registries):
  """The mods run on masked pairs with a visible pair's indices (`blockwise.visible_arguments`), so a formula that is
  NaN only where the key is masked puts no NaN into the gradients: on causal packed rows with padding, the engine
  and the dense formula (the variant's `weights=`, its reference) give the outputs and the gradients (q, k, v, the
  slopes) of the same term written as a bias with the distance clipped; so does cached decoding, whose slots after
  the step hold garbage."""
  variant = flex.register("log_distance", score_mod=log_distance, params={"slope": Param(("heads",), constant(0.5))})
  q, k, v, kwargs = matrix.SETTINGS["packed_decoder_multi_query"].make()
  slopes = jnp.array([0.5, 0.25, 1.0, 2.0])
  rows = matrix.visible_rows(q, k, kwargs)

  def as_bias(q, k, v, *, params, **masking):
    bias = log_distance_bias(params["slope"], masking["q_positions"], masking["kv_positions"])
    return attention.get("dot_product").fn(q, k, v, bias=bias, **masking)

  called = dict(kwargs, params={"slope": slopes})
  want, want_grads = matrix.output_and_grads(as_bias, q, k, v, called, rows, jit=False)
  assert all_finite(want_grads)
  for fn, jit in ((functools.partial(variant.fn, query_chunk_size=4, key_chunk_size=3), True),
                  (variant.reference, False)):
    out, grads = matrix.output_and_grads(fn, q, k, v, called, rows, jit=jit)
    assert all_finite(grads)
    np.testing.assert_allclose(out[rows], want[rows], atol=1e-5)
    matrix.assert_grads_close(grads, want_grads, ("query", "key", "value", "params"))

  slots, garbage = q.shape[1], 100.0 * jax.random.normal(jax.random.PRNGKey(13), k.shape)
  positions = jnp.arange(slots)[None]

  def decoded(slopes):  # step t: query t against the slots, those after t holding garbage.
    def step(t):
      filled = lambda x: jnp.where((positions <= t)[..., None, None], x, garbage)
      return variant.fn(jax.lax.dynamic_slice_in_dim(q, t, 1, axis=1), filled(k), filled(v), causal=True,
                        q_positions=jnp.full((q.shape[0], 1), t), kv_positions=positions, params={"slope": slopes},
                        query_chunk_size=4, key_chunk_size=3)[:, 0]
    return jnp.moveaxis(jax.lax.map(step, jnp.arange(slots)), 0, 1)

  def full(slopes):
    return as_bias(q, k, v, params={"slope": slopes}, causal=True, q_positions=positions, kv_positions=positions)

  (out, grad), (want, want_grad) = (jax.value_and_grad(lambda s: (f(s) ** 2).sum())(slopes) for f in (decoded, full))
  assert bool(jnp.isfinite(grad).all())
  np.testing.assert_allclose(grad, want_grad, rtol=1e-5)
  np.testing.assert_allclose(out, want, rtol=1e-5)


@pytest.mark.slow  # it trains; the finite gradients on every path are checked in the default run (above).
def test_a_mod_finite_only_where_the_key_is_visible_trains_a_language_model(scratch_registries):
  """The log-distance score_mod in a small language model (causal): a few steps of gradient descent have a finite
  loss and finite gradients, the slopes' included, and the loss goes down."""
  flex.register("log_distance", score_mod=log_distance, params={"slope": Param(("heads",), constant(0.5))})
  model, params = lm_and_params(**{"model.attention": "log_distance", "model.positional": "none"})
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 16), 1, 50)

  @jax.jit
  def step(params):
    def loss(params):
      logits = model.apply({"params": params}, tokens[:, :-1])
      return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], axis=-1))
    value, grads = jax.value_and_grad(loss)(params)
    return value, grads, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

  losses = []
  for _ in range(3):
    loss, grads, params = step(params)
    assert bool(jnp.isfinite(loss)) and all_finite(grads)
    assert float(jnp.abs(grads["decoder"]["layer_0"]["self_attention"]["log_distance"]["slope"]).max()) > 0
    losses.append(float(loss))
  assert losses[-1] < losses[0]
