"""benchmarks/peers.py (jformer beside torch.nn.Transformer). The script's own logic runs without torch (the
optional extra `bench`, not in CI): rows from timed steps with contenders standing in for the frameworks, the
table, failed contenders, the line naming the install. Where torch is installed: the torch model has jformer's
parameters plus the documented extras, and `--tiny` gives every contender a row with a positive tokens/s, in the
table and the JSON."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

EAGER = ["jformer-f32", "jformer-bf16", "torch-eager-f32", "torch-eager-bf16"]
COMPILED = ["torch-compile-f32", "torch-compile-bf16"]


@pytest.fixture
def peers(monkeypatch):
  monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
  import peers

  return peers


# Seconds per step of the stand-in contenders (each "step" returns its time: see `fake_timing`), and of the probes.
STEP_SECONDS = {"jformer-f32": 0.04, "jformer-bf16": 0.02, "torch-eager-bf16": 0.05, "torch-compile-bf16": 0.025}
PEAK_SECONDS = {"float32": 0.002, "bfloat16": 0.001}


@pytest.fixture
def fake_timing(peers, monkeypatch):
  """`common.time_repeated` timing a call as the seconds the call returns (no clock), every call undisturbed."""
  import common

  monkeypatch.setattr(common, "time_repeated", lambda fn, reps, warmup=1: common.Timing([fn()] * reps, [0.0] * reps))
  monkeypatch.setattr(peers, "peak_probes", lambda dtypes, size: {
      (framework, dtype): (lambda seconds=PEAK_SECONDS[dtype]: seconds) for dtype in dtypes
      for framework in ("jax", "torch")})


def test_rows_come_from_the_timed_steps_of_each_contender(peers, fake_timing, monkeypatch):
  """Stand-in contenders (no torch, no jformer step): each row's tokens/s, MFU and ratios follow from its median
  step time; a contender that fails to build, or at a timed round, is a failed row with its reason; the others
  still run."""
  calls = {name: 0 for name in STEP_SECONDS}

  def build(shape, contender):
    if contender.name == "torch-eager-f32":
      raise RuntimeError("no float32 kernel here\nsecond line")
    if contender.name == "torch-compile-f32":
      return (lambda: 1 / 0), {"note": ""}

    def run():
      calls[contender.name] += 1
      return STEP_SECONDS[contender.name]

    return run, {"first_step_s": 1.5, "note": ""}

  monkeypatch.setattr(peers, "build", build)
  shape = peers.TOY
  rows, peaks = peers.measure_shape(shape, list(peers.CONTENDERS.values()), reps=3, peak_size=10)
  rows = {row["contender"]: row for row in rows}
  assert list(rows) == list(peers.CONTENDERS) and calls == {name: 3 for name in STEP_SECONDS}
  tokens = shape.batch * (shape.source_length + shape.target_length)
  for name, seconds in STEP_SECONDS.items():
    row = rows[name]
    peak = 2 * 10**3 / PEAK_SECONDS[row["dtype"]]
    assert row["status"] == "ok" and row["step_ms"]["median"] == seconds * 1e3
    assert row["tokens_per_s"] == round(tokens / seconds)
    assert row["mfu"] == round(shape.train_flops() / seconds / peak, 3)
    assert row["vs_torch_bf16"] == round(0.05 / seconds, 2)
  assert rows["torch-compile-bf16"]["vs_eager"] == 2.0 and rows["torch-compile-bf16"]["note"] == (
      "faster than eager (2.0x)")
  failed = rows["torch-eager-f32"]  # its first line, where it was raised, and no figures.
  assert failed["status"] == "failed" and "tokens_per_s" not in failed
  assert failed["reason"].startswith("RuntimeError: no float32 kernel here (test_benchmark_peers.py:")
  assert rows["torch-compile-f32"]["reason"].startswith("at timed round 0: ZeroDivisionError: division by zero")
  assert peaks == {f"{framework} {dtype}": {"gflop_per_s": round(2e3 / seconds / 1e9, 1),
                                            "ms": {"median": seconds * 1e3, "min": seconds * 1e3,
                                                   "max": seconds * 1e3, "reps": 3, "other_cpu": [0.0] * 3,
                                                   "disturbed": 0}}
                   for dtype, seconds in PEAK_SECONDS.items() for framework in ("jax", "torch")}

  printed = peers.table(list(rows.values()))
  assert "| TOY | torch | eager | float32 | failed | - | - | - | - | RuntimeError: no float32 kernel here" in printed
  assert (f"| TOY | jformer | jit | bfloat16 | 20.0 (20.0-20.0) | {round(tokens / 0.02):,} | 2.50x | "
          f"{100 * rows['jformer-bf16']['mfu']:.1f}% | 0/3 | first step 1.5 s |") in printed


def test_without_torch_the_script_names_the_install(peers, monkeypatch):
  monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError, as where it is not installed.
  with pytest.raises(SystemExit, match=r"benchmarks/peers.py needs torch: .venv/bin/pip install -e '.\[bench\]'"):
    peers.main(["--tiny"])


@pytest.mark.parametrize("shape_name", ["TOY", "TINY", "BASE"])
def test_torch_model_has_jformers_parameters_plus_key_biases_and_final_norms(peers, shape_name):
  pytest.importorskip("torch")
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
  torch = pytest.importorskip("torch")

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
  pytest.importorskip("torch")
  out, result = run_tiny(tmp_path, EAGER)
  check_rows(out, result, EAGER)


@pytest.mark.slow
def test_tiny_runs_every_contender(tmp_path):
  """With torch.compile (inductor builds C++ kernels: about 40 s per dtype on 2 cores with a cold cache)."""
  pytest.importorskip("torch")
  out, result = run_tiny(tmp_path, EAGER + COMPILED)
  check_rows(out, result, EAGER + COMPILED)
  for name in COMPILED:
    row = next(r for r in result["rows"] if r["contender"] == name)
    assert row["vs_eager"] > 0 and "than eager" in row["note"]
