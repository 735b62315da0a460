"""benchmarks/nanogpt_baseline.py, its torch-free parts (no torch needed, fast): the folder's bytes, the batches'
windows, the evaluation windows, nanoGPT's learning-rate schedule and the budget's step plan; with torch installed
(the optional extra `bench`), a 3-update run of a tiny model, marked integration."""

import gzip
import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def baseline(monkeypatch):
  monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
  import nanogpt_baseline

  return nanogpt_baseline


def nanogpt_get_lr(it, learning_rate, warmup_iters, lr_decay_iters, min_lr):
  """train.py's get_lr, restated."""
  if it < warmup_iters:
    return learning_rate * (it + 1) / (warmup_iters + 1)
  if it > lr_decay_iters:
    return min_lr
  decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
  return min_lr + 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) * (learning_rate - min_lr)


def test_imports_without_torch():
  code = "import sys; sys.path.insert(0, 'benchmarks'); import nanogpt_baseline; assert 'torch' not in sys.modules"
  subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_learning_rate_is_nanogpts_warmup_then_cosine_to_min_lr_at_the_last_update(baseline):
  peak, minimum, warmup, last = 1e-3, 1e-4, 100, 999  # 1000 updates: indices 0..999.

  def lr(it):
    return baseline.learning_rate(it, peak=peak, minimum=minimum, warmup=warmup, last=last)

  assert lr(0) == pytest.approx(1e-3 / 101)  # warm-up start: lr * 1 / 101.
  assert lr(99) == pytest.approx(1e-3 * 100 / 101)  # last warm-up update.
  assert lr(100) == pytest.approx(1e-3)  # the peak, where the cosine starts.
  assert lr((100 + 999) / 2) == pytest.approx(5.5e-4)  # halfway down: (peak + min) / 2.
  assert lr(999) == pytest.approx(1e-4) and lr(1200) == pytest.approx(1e-4)  # min lr at the last update and after.
  for it in (0, 1, 50, 99, 100, 101, 300, 549, 998, 999, 1000):
    assert lr(it) == pytest.approx(nanogpt_get_lr(it, peak, warmup, last, minimum)), it
  lrs = [lr(it) for it in range(100, 1000)]
  assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_short_plans_shorten_the_warmup_to_half_the_run(baseline):
  assert baseline.schedule_warmup(100, None) == 100  # not planned yet.
  assert baseline.schedule_warmup(100, 600) == 100
  assert baseline.schedule_warmup(100, 150) == 75
  assert baseline.learning_rate(149, peak=1e-3, minimum=1e-4, warmup=75, last=149) == pytest.approx(1e-4)


@pytest.mark.parametrize("length", [1, 63, 64, 1000, 1024])
def test_evaluation_windows_score_every_byte_once_each_from_the_byte_before(baseline, length):
  data = np.random.default_rng(0).integers(0, 256, length).astype(np.uint8)
  windows = baseline.evaluation_windows(data, 64)
  full, rest = divmod(length, 64)
  assert [targets.shape for _, targets in windows] == [(full, 64)] * bool(full) + [(1, rest)] * bool(rest)
  targets = np.concatenate([t.ravel() for _, t in windows])
  inputs = np.concatenate([i.ravel() for i, _ in windows])
  np.testing.assert_array_equal(targets, data)  # every byte once, in order.
  np.testing.assert_array_equal(inputs, np.concatenate([[ord("\n")], data[:-1]]))  # each from the one before.
  assert all(i.shape == t.shape for i, t in windows)


def test_curve_windows_spread_over_the_split(baseline):
  data = np.arange(100 * 8, dtype=np.int64).astype(np.uint8)  # 100 windows of 8 bytes.
  inputs, targets = baseline.curve_windows(data, 8, 5)
  assert inputs.shape == targets.shape == (5, 8)
  np.testing.assert_array_equal(targets[:, 0], (np.array([0, 25, 50, 74, 99]) * 8).astype(np.uint8))
  assert baseline.curve_windows(data, 8, 500)[0].shape == (100, 8)  # all of them, when fewer than asked.
  assert baseline.curve_windows(data[:5], 8, 64)[1].shape == (1, 5)  # shorter than a window: the rest.


def test_sample_windows_are_nanogpts_get_batch(baseline):
  data = np.arange(200, dtype=np.uint8)  # byte i is i: a window's first byte is its offset.
  windows = baseline.sample_windows(data, np.random.default_rng(0), 5000, 16)
  assert windows.shape == (5000, 17) and windows.dtype == np.int64
  np.testing.assert_array_equal(np.diff(windows, axis=1), 1)  # contiguous: targets = inputs shifted by one.
  starts = windows[:, 0]
  assert starts.min() == 0 and starts.max() == 200 - 16 - 1  # offsets in [0, n - block_size).
  again = baseline.sample_windows(data, np.random.default_rng(0), 5000, 16)
  np.testing.assert_array_equal(windows, again)  # seeded.


def write_folder(folder, texts, gzipped):
  folder.mkdir()
  for split, text in texts.items():
    path = folder / f"{split}.txt{'.gz' if gzipped else ''}"
    path.write_bytes(gzip.compress(text) if gzipped else text)


TEXTS = {"train": "Erste Zeile\nzweite Zeile\n\nnext document, \u00e9t\u00e9\n".encode() * 20,
         "valid": b"one\n\ntwo\r\n", "test": b"\n\nthree\n"}


def test_txt_and_txt_gz_read_the_same_raw_bytes(baseline, tmp_path):
  write_folder(tmp_path / "plain", TEXTS, gzipped=False)
  write_folder(tmp_path / "gz", TEXTS, gzipped=True)
  plain, gz = (baseline.read_splits(str(tmp_path / name), 16) for name in ("plain", "gz"))
  for split, text in TEXTS.items():
    assert plain[split].tobytes() == gz[split].tobytes() == text  # blank lines and "\r" kept.
    assert plain[split].dtype == np.uint8


def test_read_splits_names_what_is_wrong(baseline, tmp_path):
  write_folder(tmp_path / "d", TEXTS, gzipped=False)
  (tmp_path / "d" / "test.txt.gz").write_bytes(gzip.compress(b"x"))
  with pytest.raises(ValueError, match="both .*test.txt and .*test.txt.gz"):
    baseline.read_splits(str(tmp_path / "d"), 16)
  (tmp_path / "d" / "test.txt").unlink()
  (tmp_path / "d" / "valid.txt").unlink()
  with pytest.raises(ValueError, match="no valid.txt or valid.txt.gz"):
    baseline.read_splits(str(tmp_path / "d"), 16)
  (tmp_path / "d" / "valid.txt").write_bytes(b"")
  with pytest.raises(ValueError, match="valid.txt is empty"):
    baseline.read_splits(str(tmp_path / "d"), 16)
  with pytest.raises(ValueError, match=f"train has {len(TEXTS['train'])} bytes"):
    baseline.read_splits(str(tmp_path / "d"), 2000)


def test_evaluations_count_the_periodic_ones_and_the_last(baseline):
  assert baseline.evaluations(1, 1000, 100) == 10  # 100, ..., 1000 (the last is one of them).
  assert baseline.evaluations(1, 1050, 100) == 11  # and after 1050.
  assert baseline.evaluations(22, 250, 100) == 3  # 100, 200, 250.
  assert baseline.evaluations(251, 250, 100) == 0


def test_plan_fits_updates_and_evaluations_in_the_budget_left(baseline):
  plan = dict(budget_seconds=600.0, spent_seconds=10.0, done_steps=21, step_seconds=0.5, eval_seconds=2.0)
  # 590 s left. Every 100: 1153 updates = 1132 more x 0.5 s + 12 evaluations (100..1100, 1153) x 2 s = 590 s; one
  # more is 590.5 s.
  assert baseline.plan_steps(**plan, eval_every=100) == 1153
  # First plan (the interval not fixed): 1169 updates, every ceil(1169 / 8) = 147: 7 + 1 evaluations, 574 + 16 s.
  assert baseline.plan_steps(**plan, eval_every=None) == 1169
  assert baseline.default_eval_every(1169) == 147
  assert baseline.plan_steps(**{**plan, "eval_seconds": 0.0}, eval_every=None) == 21 + 1180
  assert baseline.plan_steps(**{**plan, "spent_seconds": 700.0}, eval_every=100) == 21  # over: no more updates.
  with pytest.raises(ValueError, match="positive"):
    baseline.plan_steps(**{**plan, "step_seconds": 0.0}, eval_every=100)


def test_final_plan_comes_seventy_percent_of_the_way(baseline):
  assert baseline.replan_step(21, 1153) == 21 + 792  # floor(0.7 x 1132).
  assert baseline.replan_step(21, 22) == 22  # after the first plan in any case.


def test_defaults_are_lm_demos_shape_and_shakespeare_chars_recipe(baseline):
  args = baseline.parse_args(["--data=d"])
  assert (args.n_embd, args.n_layer, args.n_head, args.batch, args.block_size) == (256, 4, 4, 16, 256)
  assert (args.lr, args.min_lr, args.warmup, args.weight_decay, args.beta1, args.beta2) == (1e-3, 1e-4, 100, 0.1,
                                                                                              0.9, 0.99)
  assert (args.dropout, args.grad_clip, args.bias, args.minutes, args.seed) == (0.2, 1.0, False, 10.0, 0)
  assert args.threads == baseline.cpu_count() >= 1
  assert baseline.parse_args(["--data=d", "--bias", "--min_lr=0"]).bias
  assert baseline.parse_args(["--data=d", "--min_lr=0"]).min_lr == 0.0


@pytest.mark.integration
def test_three_updates_of_a_tiny_model(baseline, tmp_path):
  """Starts at about log2(256) = 8 bits per byte (init logits near 0), stays finite, and writes the record."""
  pytest.importorskip("torch")
  write_folder(tmp_path / "d", TEXTS, gzipped=True)
  path = tmp_path / "record.json"
  record = baseline.main([f"--data={tmp_path / 'd'}", "--steps=3", "--n_embd=32", "--n_layer=2", "--n_head=2",
                          "--batch=4", "--block_size=16", "--eval_every=1", "--threads=1", f"--json={path}"])
  assert json.loads(path.read_text()) == json.loads(json.dumps(record))
  results = record["results"]
  assert results["steps"] == 3 and [point["step"] for point in results["curve"]] == [0, 1, 2, 3]
  assert abs(results["curve"][0]["valid_bpb"] - 8.0) < 0.1
  assert all(math.isfinite(results[key]) and 6 < results[key] < 9 for key in ("valid_bpb", "test_bpb"))
  assert results["bytes"] == {split: len(text) for split, text in TEXTS.items()}
  assert results["parameters"] == 256 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32
  machine = record["machine"]
  assert machine["command"].startswith("benchmarks/nanogpt_baseline.py --data=") and machine["torch_threads"] == 1
  assert machine["commit"] and machine["cpu"] and machine["date"]
