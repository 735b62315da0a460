"""`auto` picks the kernel per backend, shape and dtype, logs each distinct choice once, and falls back (logged)
when a kernel cannot express the call; its numbers are checked with every variant in test_attention_variants.py."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import attention
from jformer.attention import auto, blockwise


def shaped(length, kv_length=None, dtype=jnp.float32, head_dim=8):
  return (jax.ShapeDtypeStruct((2, length, 2, head_dim), dtype),
          jax.ShapeDtypeStruct((2, kv_length or length, 2, head_dim), dtype))


PADDING = jnp.ones((2, 4096), jnp.int32)
SOURCE_PADDING = jnp.ones((2, 1024), jnp.int32)
POSITIONS = jnp.arange(4096)[None]
BIAS = jnp.zeros((1, 2, 4096, 4096))


@pytest.mark.parametrize("q_len, kv_len, backend, dtype, masking, want", [
    (64, 64, "cpu", jnp.float32, {}, "dot_product"),
    (511, 512, "cpu", jnp.float32, {}, "dot_product"),
    (512, 512, "cpu", jnp.float32, {}, "chunked"),
    (1, 4096, "cpu", jnp.float32, {}, "dot_product"),  # a decode step against a long cache.
    (4096, 4096, "cpu", jnp.float32, dict(dropout_rate=0.1), "dot_product"),  # only the reference drops weights.
    (4096, 4096, "gpu", jnp.bfloat16, dict(causal=True), "cudnn"),
    (4096, 4096, "gpu", jnp.float32, dict(causal=True), "pallas_gpu"),  # cuDNN takes half precision only.
    (4096, 1024, "gpu", jnp.float32, dict(q_segment_ids=PADDING, kv_segment_ids=SOURCE_PADDING), "chunked"),
    (4096, 4096, "gpu", jnp.bfloat16, dict(causal=True, bias=BIAS), "chunked"),
    (4096, 4096, "gpu", jnp.bfloat16, dict(dropout_rate=0.1), "dot_product"),
    (4096, 4096, "tpu", jnp.bfloat16, dict(causal=True, q_segment_ids=PADDING, kv_segment_ids=PADDING), "splash"),
    (4096, 4096, "tpu", jnp.bfloat16, dict(causal=True, q_positions=POSITIONS, kv_positions=POSITIONS), "chunked"),
    # Without causal masking positions do not act: dropped, so splash takes a packed encoder's call.
    (4096, 4096, "tpu", jnp.bfloat16, dict(q_positions=POSITIONS, kv_positions=POSITIONS), "splash"),
    (1, 4096, "tpu", jnp.bfloat16, dict(causal=True, q_positions=POSITIONS[:, :1], kv_positions=POSITIONS),
     "dot_product"),  # a decode step: masking by position, which splash does not do.
    # A sliding window (`local`) is data the kernels take: splash's LocalMask, cuDNN's local_window_size (causal).
    (4096, 4096, "tpu", jnp.bfloat16, dict(window=(127, 127)), "splash"),
    (4096, 4096, "tpu", jnp.bfloat16, dict(causal=True, window=(127, 127)), "splash"),
    (4096, 4096, "gpu", jnp.bfloat16, dict(causal=True, window=(127, 127)), "cudnn"),
    (4096, 4096, "gpu", jnp.bfloat16, dict(window=(127, 127)), "chunked"),  # cuDNN's window looks back only.
    (4096, 4096, "cpu", jnp.float32, dict(causal=True, window=(127, 127)), "chunked"),
])
def test_choice(q_len, kv_len, backend, dtype, masking, want):
  query, key = shaped(q_len, kv_len, dtype)
  assert auto.choose(query, key, backend=backend, **masking).kernel == want


def test_refusals_name_each_kernel_and_why():
  query, key = shaped(4096, 1024, jnp.float32)
  choice = auto.choose(query, key, backend="gpu", q_segment_ids=PADDING, kv_segment_ids=SOURCE_PADDING)
  assert choice.describe() == (
      "chunked; not cudnn: cuDNN flash attention takes bfloat16 or float16 inputs, got float32; not pallas_gpu: it "
      "takes one segment-id array for queries and keys, so self-attention only (T == S); got T=4096, S=1024")
  query, key = shaped(4096, dtype=jnp.bfloat16, head_dim=12)
  assert auto.choose(query, key, backend="gpu", causal=True, bias=BIAS).describe() == (
      "chunked; not cudnn: does not support ['bias']; not pallas_gpu: does not support ['bias']")


def test_cudnn_with_segment_ids_has_a_per_batch_alternative():
  """cuDNN takes segment ids only as right padding, a property of the batch: `auto` keeps the next choice."""
  query, key = shaped(4096, dtype=jnp.bfloat16)
  choice = auto.choose(query, key, backend="gpu", causal=True, q_segment_ids=PADDING, kv_segment_ids=PADDING)
  assert (choice.kernel, choice.otherwise.kernel) == ("cudnn", "pallas_gpu")
  assert choice.describe() == "cudnn (batches that are not one example per row then padding: pallas_gpu)"
  query, key = shaped(4096, 1024, dtype=jnp.bfloat16)
  choice = auto.choose(query, key, backend="gpu", q_segment_ids=PADDING, kv_segment_ids=SOURCE_PADDING)
  assert (choice.kernel, choice.otherwise.kernel, choice.otherwise.refused[0][0]) == ("cudnn", "chunked", "pallas_gpu")
  assert auto.choose(query, key, backend="gpu").otherwise is None  # no segment ids: nothing to check per batch.


def test_choice_and_fallback_are_logged_once(monkeypatch, caplog):
  """On a (pretended) TPU: splash runs (interpreted) for what it can express, a causal call with positions falls
  back with the reason; each distinct choice is one log line, however often it is traced."""
  monkeypatch.setattr(auto, "_backend", lambda: "tpu")
  monkeypatch.setattr(auto, "_LOGGED", set())
  caplog.set_level(logging.INFO, logger="absl")
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (2, 8, 2, 8)) for i in range(3))
  positions = jnp.arange(8)[None]
  run = lambda **masking: attention.get("auto").fn(q, k, v, **masking)
  for _ in range(2):
    jax.jit(lambda q: attention.get("auto").fn(q, k, v, causal=True))(q)  # a new trace each time
    fallback = run(causal=True, q_positions=positions, kv_positions=positions)
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("attention 'auto'")]
  assert lines == [
      "attention 'auto' on tpu, float32, T=8 S=8 H=2 K=2 D=8, causal: splash",
      "attention 'auto' on tpu, float32, T=8 S=8 H=2 K=2 D=8, causal+positions: dot_product; not splash: does not "
      "support ['positions']"]
  want = attention.get("dot_product").fn(q, k, v, causal=True)
  np.testing.assert_allclose(run(causal=True), want, atol=1e-5)  # splash, interpreted
  np.testing.assert_allclose(fallback, want, atol=1e-5)


def test_local_runs_splash_with_its_window_on_tpu(monkeypatch, caplog):
  """`local` on a (pretended) TPU: `auto` hands its window to splash (`LocalMask`, interpreted here), which equals
  the windowed reference, causal or not; a decode step's positions fall back, logged."""
  monkeypatch.setattr(auto, "_backend", lambda: "tpu")
  monkeypatch.setattr(auto, "_LOGGED", set())
  caplog.set_level(logging.INFO, logger="absl")
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (2, 200, 4, 8)) for i in range(3))
  ids = jnp.array([[1] * 150 + [0] * 50, [1] * 200])
  local = attention.get("local")
  for causal in (False, True):
    masking = dict(causal=causal, q_segment_ids=ids, kv_segment_ids=ids)
    got = local.fn(q, k, v, window_size=20, **masking)
    want = local.reference(q, k, v, window_size=20, **masking)
    visible = np.asarray(ids, bool)
    np.testing.assert_allclose(np.asarray(got)[visible], np.asarray(want)[visible], atol=1e-5)
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("attention 'auto'")]
  assert lines == ["attention 'auto' on tpu, float32, T=200 S=200 H=4 K=4 D=8, segment_ids+window: splash",
                   "attention 'auto' on tpu, float32, T=200 S=200 H=4 K=4 D=8, causal+segment_ids+window: splash"]


_SCORED_BLOCKS = []


def _counted_dot(q, k, params):
  """q . k / sqrt(d), counting each block it scores (a host callback runs only where the block is computed)."""
  del params
  jax.debug.callback(lambda: _SCORED_BLOCKS.append(1))
  return jnp.einsum("bhqe,bhce->bhqc", q, k, preferred_element_type=jnp.float32) * q.shape[-1] ** -0.5


@pytest.mark.parametrize("window, blocks", [(None, 36), ((63, 0), 15), ((128, 0), 15), ((129, 0), 21)])
def test_chunked_computes_only_the_blocks_a_window_reaches(window, blocks):
  """8 x 8 blocks of 128, causal: 36 on or below the diagonal (8 + 7 + ... + 1). A window of 63 or 128 keys back
  reaches the diagonal block and the one before it (8 + 7); 129 back reaches one block further (+ 6). The result
  equals the reference."""
  length, chunk = 1024, 128
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, length, 1, 8)) for i in range(3))
  _SCORED_BLOCKS.clear()
  masking = dict(causal=True, q_segment_ids=None, kv_segment_ids=None, q_positions=None, kv_positions=None,
                 mask=None, bias=None, window=window)
  got = blockwise.attention(q, k, v, **masking, query_chunk_size=chunk, key_chunk_size=chunk, score=_counted_dot)
  jax.block_until_ready(got)
  jax.effects_barrier()
  assert len(_SCORED_BLOCKS) == blocks
  want = attention.get("dot_product").fn(q, k, v, causal=True, window=window)
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_long_sequence_runs_blockwise_in_linear_memory():
  length = 1024
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, length, 2, 16)) for i in range(3))
  grad = lambda name: jax.jit(jax.grad(lambda q: attention.get(name).fn(q, k, v, causal=True).sum()))
  compiled = {name: grad(name).lower(q).compile() for name in ("auto", "chunked", "dot_product")}
  temp = {name: step.memory_analysis().temp_size_in_bytes for name, step in compiled.items()}
  assert temp["auto"] == temp["chunked"] < temp["dot_product"] / 4
  np.testing.assert_allclose(compiled["auto"](q), compiled["dot_product"](q), atol=1e-5)


@pytest.mark.parametrize("window", [(3,), (-1, 2), (1.5, 2), 4])
def test_a_malformed_window_is_refused_naming_the_form(window):
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, 8, 2, 8)) for i in range(3))
  with pytest.raises(ValueError, match=r"'chunked': window=.* must be \(left, right\), two ints >= 0"):
    attention.get("chunked").fn(q, k, v, window=window)
