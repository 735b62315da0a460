"""What is particular to the library kernels `cudnn`, `splash`, `pallas_gpu` (the variant matrix in
test_attention_variants.py checks `splash` and `pallas_gpu` against the reference in the Pallas interpreter):
which calls each takes, the refusals naming why, cuDNN's segment ids as lengths, and cuDNN itself on a GPU."""

import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import helpers as matrix
from jformer import attention
from jformer.attention import cudnn

ON_GPU = jax.default_backend() == "gpu"


def test_each_kernel_takes_the_settings_it_can_express():
  """Declared features and `limits` together: the matrix settings each kernel runs (the rest are refused)."""
  calls = {setting: case.make() for setting, case in matrix.SETTINGS.items()}
  half = {setting: [x.astype(jnp.bfloat16) for x in call[:3]] + [call[3]] for setting, call in calls.items()}
  runs = lambda name, calls: sorted(setting for setting, (q, k, v, kwargs) in calls.items()
                                    if attention.get(name).refusal(q, k, v, **kwargs) is None)
  assert runs("splash", calls) == ["cross_attention", "decoder_causal", "encoder_padding", "grouped_query",
                                   "packed_cross_attention", "softcap_decoder", "window_decoder", "window_encoder"]
  assert runs("pallas_gpu", calls) == ["decoder_causal", "encoder_padding", "grouped_query"]
  assert runs("cudnn", calls) == []  # the settings are float32; cuDNN takes bfloat16/float16.
  assert runs("cudnn", half) == ["cross_attention", "decoder_causal", "encoder_padding", "grouped_query",
                                 "packed_cross_attention", "window_decoder"]  # its window looks back only.


def test_refusals_name_the_reason():
  q, k, v = matrix.random_qkv(0)
  ids = jnp.ones((2, 9), jnp.int32)
  with pytest.raises(ValueError, match=r"'pallas_gpu' cannot run this call: it takes one segment-id array for "
                                       r"queries and keys; this call passes two different arrays"):
    attention.get("pallas_gpu").fn(q, k, v, q_segment_ids=ids, kv_segment_ids=jnp.ones((2, 9), jnp.int32))
  short_k, short_v = k[:, :7], v[:, :7]
  with pytest.raises(ValueError, match=r"self-attention only \(T == S\); got T=9, S=7"):
    attention.get("pallas_gpu").fn(q, short_k, short_v)
  with pytest.raises(ValueError, match=r"'cudnn' cannot run this call: cuDNN flash attention takes bfloat16 or "
                                       r"float16 inputs, got float32"):
    attention.get("cudnn").fn(q, k, v)
  half = [x.astype(jnp.bfloat16) for x in (q, k, v)]
  assert cudnn.limits(half[0][..., :4], half[1][..., :4], half[2][..., :4]) == (
      "cuDNN needs a head_dim that is a multiple of 8 and at most 256, got 4")
  assert "index-aligned for self-attention shapes only (T == S), got T=9, S=7" in cudnn.limits(
      half[0], half[1][:, :7], half[2][:, :7], causal=True)
  with pytest.raises(ValueError, match=r"'splash' does not support \['positions'\]"):
    attention.get("splash").fn(q, k, v, causal=True, q_positions=matrix.PACKED_POSITIONS,
                               kv_positions=matrix.PACKED_POSITIONS)


@pytest.mark.skipif(ON_GPU, reason="checks the refusal off GPU")
def test_cudnn_refuses_to_run_off_gpu():
  half = [x.astype(jnp.bfloat16) for x in matrix.random_qkv(0)]
  with pytest.raises(ValueError, match=r"'cudnn' runs only on NVIDIA GPUs \(cuDNN\); JAX's backend is 'cpu'"):
    attention.get("cudnn").fn(*half)


def test_segment_ids_as_cudnn_lengths():
  """Right padding (one example per row, then id 0) is lengths; packed rows and mismatched examples are not."""
  lengths = lambda q, kv: jax.tree.map(np.asarray, cudnn.padding_lengths(jnp.array(q), jnp.array(kv)))
  q_len, kv_len, ok = lengths([[1, 1, 1, 0], [3, 3, 3, 3]], [[1, 1, 0], [3, 0, 0]])
  assert ok and q_len.tolist() == [3, 4] and kv_len.tolist() == [2, 1]
  assert lengths([[0, 0, 0, 0], [1, 1, 0, 0]], [[1, 0, 0], [1, 1, 1]])[2]  # an empty query row is fine.
  assert not lengths([[1, 1, 2, 0], [1, 1, 1, 1]], [[1, 1, 0], [1, 0, 0]])[2]  # packed query row
  assert not lengths([[1, 1, 1, 0], [1, 1, 1, 1]], [[1, 2, 0], [1, 0, 0]])[2]  # packed key row
  assert not lengths([[1, 0, 1, 0], [1, 1, 1, 1]], [[1, 1, 0], [1, 0, 0]])[2]  # padding in the middle
  assert not lengths([[1, 1, 1, 0], [2, 2, 2, 2]], [[1, 1, 0], [1, 0, 0]])[2]  # another example's keys
  assert not lengths([[1, 1, 1, 0], [1, 1, 1, 1]], [[1, 1, 0], [0, 0, 0]])[2]  # a query with no key


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_splash_over_several_blocks():
  """Two query and key blocks of 128 (lengths padded from 200), causal, packed segments, 4 query heads on 2."""
  length = 200
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, length, heads, 8)) for i, heads in enumerate((4, 2, 2)))
  ids = jnp.where(jnp.arange(length) < 150, 1, 2)[None] * (jnp.arange(length) < 190)
  kwargs = dict(causal=True, q_segment_ids=ids, kv_segment_ids=ids)
  rows = np.broadcast_to(np.asarray(ids != 0), (1, length))
  out, grads = matrix.output_and_grads(lambda *a, **kw: attention.get("splash").fn(*a, **kw, block_q=128,
                                                                                    block_kv=128), q, k, v, kwargs,
                                       rows)
  want, want_grads = matrix.output_and_grads(attention.get("dot_product").fn, q, k, v, kwargs, rows, jit=False)
  np.testing.assert_allclose(out[rows], want[rows], atol=1e-5)
  matrix.assert_grads_close(grads, want_grads, ("query", "key", "value"))


@pytest.mark.skipif(not ON_GPU, reason="cuDNN runs only on NVIDIA GPUs")
def test_cudnn_matches_the_reference_on_gpu():
  """bfloat16, causal with right padding (as lengths), and a packed batch giving NaN; tolerance 2e-2 (bf16)."""
  q, k, v = (x.astype(jnp.bfloat16) for x in matrix.random_qkv(0, q_len=64, kv_len=64))
  ids = jnp.array([[1] * 50 + [0] * 14, [1] * 64])
  kwargs = dict(causal=True, q_segment_ids=ids, kv_segment_ids=ids)
  rows = np.asarray(ids != 0)
  out = np.asarray(attention.get("cudnn").fn(q, k, v, **kwargs), np.float32)
  want = np.asarray(attention.get("dot_product").fn(q, k, v, **kwargs), np.float32)
  np.testing.assert_allclose(out[rows], want[rows], atol=2e-2)
  packed = jnp.array([[1] * 30 + [2] * 34, [1] * 64])
  assert np.isnan(np.asarray(attention.get("cudnn").fn(q, k, v, q_segment_ids=packed, kv_segment_ids=packed),
                             np.float32)).all()


def run_accelerator_check(*flags):
  root = pathlib.Path(__file__).resolve().parents[1]
  return subprocess.run([sys.executable, str(root / "benchmarks" / "accelerator.py"), "--json=", *flags], cwd=root,
                        env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, check=True).stdout


@pytest.mark.integration
@pytest.mark.skipif(jax.default_backend() != "cpu", reason="checks what is skipped on CPU")
def test_accelerator_check_says_what_it_skips_on_cpu():
  out = run_accelerator_check()
  assert "| check | dtype | result | figures |" in out and "| attention" not in out
  for line in ("skipped cudnn: built for ['gpu'], this backend is cpu (it runs nowhere else)",
               "skipped splash: built for ['tpu'], this backend is cpu (it would run in the Pallas interpreter: use "
               "--tiny)",
               "skipped train step and decoding of BASE: no GPU or TPU here (use --tiny for a smoke run)"):
    assert line in out


@pytest.mark.slow
def test_accelerator_check_smoke_runs_tiny():
  """Every part of the script at tiny sizes (kernels interpreted on CPU): each row passes or is refused."""
  out = run_accelerator_check("--tiny")
  rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| attention ")]
  assert len(rows) >= 12 and {row[2] for row in rows} <= {"pass", "refused"}
  assert any(row[0].startswith("| attention splash: cross, padding") and row[2] == "pass" for row in rows)
  assert "| train step TINY/4, auto" in out and out.count("| decode TINY/4") == 2
