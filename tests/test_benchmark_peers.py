"""benchmarks/peers.py (jformer beside torch.nn.Transformer): skipped where torch is not installed (it is the
optional extra `bench`, not in CI). The torch model has jformer's parameters plus the documented extras, and
`--tiny` gives every contender a row with a positive tokens/s, in the table and the JSON."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")

REPO = pathlib.Path(__file__).resolve().parents[1]

EAGER = ["jformer-f32", "jformer-bf16", "torch-eager-f32", "torch-eager-bf16"]
COMPILED = ["torch-compile-f32", "torch-compile-bf16"]


@pytest.fixture
def peers(monkeypatch):
  monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
  import peers

  return peers


@pytest.mark.parametrize("shape_name", ["TOY", "TINY", "BASE"])
def test_torch_model_has_jformers_parameters_plus_key_biases_and_final_norms(peers, shape_name):
  import common

  shape = peers.TOY if shape_name == "TOY" else common.SHAPES[shape_name]
  counts = peers.parameter_counts(shape)
  n, d = shape.layers, shape.d_model
  assert counts["torch_extra"] == {"key biases": 3 * n * d, "final LayerNorms": 4 * d}
  assert counts["torch"] == counts["jformer"] + sum(counts["torch_extra"].values())
  # The tied embedding is counted once on both sides: V d of the total.
  assert counts["jformer"] > shape.vocab * d


def test_torch_model_masks_the_future_and_is_tied(peers):
  """Changing the targets from position k on leaves the logits of positions <= k alone (the decoder sees the
  targets shifted right, causally) and changes the later ones; the output projection is the embedding (one
  V x d parameter tensor)."""
  import torch

  shape = peers.TOY
  model = peers.torch_model(shape).eval()  # no dropout; gradients on, so torch's inference fast path stays off.
  assert sum(1 for p in model.parameters() if p.shape == (shape.vocab, shape.d_model)) == 1
  batch = shape.random_batch()
  inputs, targets = (torch.from_numpy(batch[k]).long() for k in ("inputs", "targets"))
  k = shape.target_length // 2
  changed = targets.clone()
  changed[:, k:] = 1 + changed[:, k:] % (shape.vocab - 1)
  logits, changed_logits = model.logits(inputs, targets), model.logits(inputs, changed)
  torch.testing.assert_close(logits[:, :k + 1], changed_logits[:, :k + 1])
  assert not torch.allclose(logits[:, k + 1:], changed_logits[:, k + 1:])


def run_tiny(tmp_path, contenders):
  path = tmp_path / "peers.json"
  out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "peers.py"), "--tiny", f"--json={path}",
                        f"--contenders={','.join(contenders)}"], cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=True).stdout
  return out, json.loads(path.read_text())


def check_rows(out, result, contenders):
  rows = {row["contender"]: row for row in result["rows"]}
  assert list(rows) == contenders
  for name, row in rows.items():
    assert row["status"] == "ok" and row["tokens_per_s"] > 0 and row["mfu"] > 0, row
    framework, *_ = name.split("-")
    assert f"| TOY | {framework} | {row['mode']} | {row['dtype']} |" in out
  assert rows["torch-eager-bf16"]["vs_torch_bf16"] == 1.0
  machine = result["machine"]
  assert machine["commit"] and "--tiny" in machine["command"] and machine["torch_threads"] >= 1 and machine["date"]
  assert set(result["peaks"]["TOY"]) == {"jax float32", "jax bfloat16", "torch float32", "torch bfloat16"}
  counts = result["parameters"]["TOY"]
  assert counts["torch"] == counts["jformer"] + sum(counts["torch_extra"].values())


def test_tiny_runs_jformer_and_eager_torch(tmp_path):
  out, result = run_tiny(tmp_path, EAGER)
  check_rows(out, result, EAGER)


@pytest.mark.slow
def test_tiny_runs_every_contender(tmp_path):
  """With torch.compile (inductor builds C++ kernels: about 40 s per dtype on 2 cores with a cold cache)."""
  out, result = run_tiny(tmp_path, EAGER + COMPILED)
  check_rows(out, result, EAGER + COMPILED)
  for name in COMPILED:
    row = next(r for r in result["rows"] if r["contender"] == name)
    assert row["vs_eager"] > 0 and "than eager" in row["note"]
