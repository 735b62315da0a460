"""Distributed decoding (jformer/decode/distributed.py): the Translator on 8 devices, and on 2 processes, gives the
same translations (hence the same BLEU) as one device, for beam search, greedy search and sampling.

Run as a script (`python tests/test_decode_distributed.py OUT.json METHOD...`), this file is one process of the
2-process test: it joins the job named by the JFORMER_* environment variables and writes its translations.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

if __name__ == "__main__":  # a worker process: 2 CPU devices of its own, set before jax is imported.
  import xla_flags  # this file's folder, tests/, is the script's.

  os.environ["XLA_FLAGS"] = xla_flags.with_devices(2)
  os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from jformer import config as config_lib  # noqa: E402
from jformer import tasks  # noqa: E402
from jformer.decode.distributed import RowParallel  # noqa: E402
from jformer.decode.translator import Translator  # noqa: E402
from jformer.ops.tokens import EOS_ID, PAD_ID  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
VOCAB = 64
# 21 sentences (not a multiple of 8 devices, nor of 2 processes x 2 devices) of 3 to 40 characters, and one blank.
SENTENCES = [("the quick brown fox jumps over the lazy dog"[i % 7:i % 7 + 3 + (i * 11) % 38]) for i in range(21)]
SENTENCES.insert(5, " ")


class CharTokenizer:
  """Characters to ids 3..VOCAB-1, then EOS; decoding writes the ids up to EOS as numbers."""
  vocab_size = VOCAB

  def encode(self, text: str) -> list[int]:
    return [3 + ord(c) % (VOCAB - 3) for c in text] + [EOS_ID]

  def decode(self, ids) -> str:
    ids = list(ids)
    ids = ids[:ids.index(EOS_ID)] if EOS_ID in ids else ids
    return " ".join(str(i) for i in ids if i != PAD_ID)


def tiny_model():
  """A random-init 1-layer Transformer, weights x 4 so that its outputs depend on the source (at the plain init it
  repeats one token); the same parameters in every process (seed 0)."""
  config = config_lib.load(REPO / "configs" / "small.py", {
      "model.vocab_size": VOCAB, "model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64,
      "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, "model.max_length": 64,
      "model.dropout_rate": 0.0})
  model = tasks.build_model(config)
  tokens = np.ones((1, 8), np.int32)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), *model.call_arguments({"inputs": tokens, "targets": tokens})[0])
  return model, jax.tree.map(lambda x: 4.0 * x, params["params"])


OPTIONS = {"beam": dict(method="beam", beam_size=3), "greedy": dict(method="greedy"),
           "sample": dict(method="sample", temperature=1.5, top_k=8)}


def translate(model, params, method: str, *, devices=None, batch_size: int = 6) -> list[str]:
  translator = Translator(model, params, CharTokenizer(), batch_size=batch_size, length_bucket=8,
                          max_extra_length=6, devices=devices, **OPTIONS[method])
  return translator(SENTENCES, rng=jax.random.PRNGKey(7))


@pytest.fixture(scope="module")
def model_and_params():
  return tiny_model()


@pytest.fixture(scope="module")
def one_device(model_and_params):
  """Each method's translations on one device, translated when a test first asks for them."""

  class Translations(dict):
    def __missing__(self, method):
      self[method] = translate(*model_and_params, method, devices=jax.devices()[:1])
      return self[method]

  return Translations()


@pytest.mark.parametrize("method", [pytest.param(method, marks=pytest.mark.integration if method == "beam" else
                                                 pytest.mark.slow)
                                    for method in OPTIONS])  # beam search (what `jformer translate` does): integration.
def test_one_device_translations_are_diverse(one_device, method):
  hypotheses = one_device[method]
  assert hypotheses[5] == ""  # the blank line.
  assert len(set(hypotheses)) >= 15, (method, hypotheses)  # a misplaced row would change the list.
  assert sum(len(set(h.split())) > 1 for h in hypotheses) >= 15, (method, hypotheses)  # not one token repeated.


@pytest.mark.slow
def test_beams_and_sampling_change_the_translations(one_device):
  differ = lambda a, b: sum(x != y for x, y in zip(one_device[a], one_device[b]))
  assert differ("beam", "greedy") >= 3 and differ("sample", "greedy") >= 15  # beams and sampling do something.


# Beam search with batches of 16 rows (2 per device, the last batch padded) in the default run; every method and
# batch size in the slow run.
@pytest.mark.parametrize("batch_size, method", [
    pytest.param(batch_size, method, marks=pytest.mark.integration if (batch_size, method) == (13, "beam")
                 else pytest.mark.slow)
    for batch_size in (6, 13) for method in OPTIONS])
def test_eight_devices_translate_like_one(model_and_params, one_device, method, batch_size):
  """Batches of 8 or 16 rows (6 or 13 rounded up to 8 devices), the last one padded, vs batches of 6 rows."""
  from jformer.tasks import bleu

  assert jax.device_count() == 8
  hypotheses = translate(*model_and_params, method, batch_size=batch_size)
  assert hypotheses == one_device[method]
  assert bleu.corpus_bleu(hypotheses, SENTENCES) == bleu.corpus_bleu(one_device[method], SENTENCES)


def test_row_parallel_pads_splits_and_gathers_in_order():
  parallel = RowParallel()
  assert [parallel.padded_rows(n) for n in (0, 1, 8, 9, 21)] == [8, 8, 8, 16, 24]
  rows = np.arange(24 * 3, dtype=np.int32).reshape(24, 3)
  device_of_row = parallel.map_rows(lambda shared, x: x * shared + jax.lax.axis_index("rows"))
  out = parallel.gather(device_of_row(parallel.replicate(np.int32(10)), parallel.shard_rows(rows)))
  np.testing.assert_array_equal(out, rows * 10 + np.repeat(np.arange(8), 3)[:, None])  # device k: rows 3k..3k+2.
  with pytest.raises(ValueError, match="cannot be split in equal shares across 8 devices"):
    parallel.shard_rows(rows[:21])


def test_sampling_with_one_key_per_row_does_not_depend_on_the_other_rows():
  """Rows permuted (with their keys), or half of them decoded alone, sample the same tokens."""
  from helpers import SamplingStepModel
  from jformer.decode import sample

  model = SamplingStepModel(seed=0, batch=16, vocab=7, max_len=10)
  keys = jax.random.split(jax.random.key(3), 16)

  def run(rows, row_keys):
    cache = {"row": jax.numpy.asarray(rows, jax.numpy.int32), "index": jax.numpy.int32(0)}
    return np.asarray(sample(model.step, cache, row_keys, batch_size=len(rows), max_decode_len=10, temperature=1.5))

  everything = run(np.arange(16), keys)
  permutation = np.random.default_rng(0).permutation(16)
  np.testing.assert_array_equal(run(permutation, keys[permutation]), everything[permutation])
  np.testing.assert_array_equal(run(np.arange(8), keys[:8]), everything[:8])
  assert len({tuple(row) for row in everything}) >= 12  # the rows do sample different tokens.
  with pytest.raises(ValueError, match=r"one PRNG key or one per row \(16\)"):
    run(np.arange(16), keys[:5])
  with pytest.raises(ValueError, match="sampling needs a PRNG key"):
    run(np.arange(16), None)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_translate_like_one_device(tmp_path, one_device):
  """2 processes x 2 CPU devices (gloo): each process gets every translation, equal to one device's."""
  port, methods = _free_port(), ["beam", "greedy", "sample"]
  env = {**os.environ, "JFORMER_COORDINATOR_ADDRESS": f"localhost:{port}", "JFORMER_NUM_PROCESSES": "2",
         "PYTHONPATH": str(REPO)}
  workers = [subprocess.Popen([sys.executable, __file__, str(tmp_path / f"out_{pid}.json"), *methods], cwd=REPO,
                              env={**env, "JFORMER_PROCESS_ID": str(pid)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for pid in (0, 1)]
  try:
    outputs = [worker.communicate(timeout=300)[0] for worker in workers]
  finally:
    for worker in workers:  # one that failed leaves the other waiting for it.
      if worker.poll() is None:
        worker.kill()
  for worker, output in zip(workers, outputs):
    assert worker.returncode == 0, output
  for pid in (0, 1):
    got = json.loads((tmp_path / f"out_{pid}.json").read_text())
    assert got["devices"] == 4 and got["processes"] == 2
    for method in methods:
      assert got[method] == one_device[method], (pid, method)


def _worker(out: str, methods: list[str]) -> None:
  from jformer import parallel

  assert parallel.initialize_distributed()
  model, params = tiny_model()
  result = {"devices": jax.device_count(), "processes": jax.process_count()}
  result.update({method: translate(model, params, method) for method in methods})
  pathlib.Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
  _worker(sys.argv[1], sys.argv[2:])
