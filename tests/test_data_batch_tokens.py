"""Token-budget batching (data.batch_tokens): the budget, the bucket shapes, every example once per epoch, little
padding, exact resume, equal shapes on two hosts, config errors, the bundled corpus near the budget, and
`jformer train` (one process and two)."""

from __future__ import annotations

import collections
import json
import os

import jax
import numpy as np
import pytest

from helpers import REPO, finish_processes, tiny_overrides, train_processes
from jformer import config as config_lib
from jformer.data import buckets, hosts, pipeline, sources
from jformer.data.pipeline import TokenizedPairs, token_budget_dataset, token_budget_plan
from jformer.data.tokenizer import EOS_ID, get_tokenizer

MAX_LENGTH = 48


def _pairs(ids, seed: int = 0) -> TokenizedPairs:
  """Example i: inputs [i+3]*k + [EOS], targets [i+3]*m + [EOS], so every token names its example; k in
  [1, MAX_LENGTH) with short ones more likely, m within 3 of k (as a translation's lengths go together)."""
  rng = np.random.default_rng(seed)
  k = np.minimum(rng.geometric(1 / 12, len(ids)), MAX_LENGTH - 1)
  lengths = {"inputs": k, "targets": np.clip(k + rng.integers(-3, 4, len(ids)), 1, MAX_LENGTH - 1)}
  rows = {f: [[i + 3] * int(n) + [EOS_ID] for i, n in zip(ids, lengths[f])] for f in pipeline.FEATURES}
  (inputs, inputs_offsets), (targets, targets_offsets) = (pipeline.ragged(rows[f]) for f in pipeline.FEATURES)
  return TokenizedPairs(inputs, inputs_offsets, targets, targets_offsets)


def _examples(batch) -> list[int]:
  """Example ids of the rows of `batch` (empty rows left out), after checking each row is one padded example."""
  found = []
  for row in range(len(batch["inputs"])):
    for f in pipeline.FEATURES:
      tokens, seg, pos = (batch[f"{f}{s}"][row] for s in ("", "_segmentation", "_position"))
      n = int((tokens != 0).sum())
      np.testing.assert_array_equal(seg, (np.arange(len(seg)) < n).astype(np.int32))
      np.testing.assert_array_equal(pos[:n], np.arange(n))
      assert n == 0 or tokens[n - 1] == EOS_ID
    if batch["inputs"][row, 0]:
      assert batch["targets"][row, 0] == batch["inputs"][row, 0]
      found.append(int(batch["inputs"][row, 0]) - 3)
  return found


def _plan(pairs, batch_tokens=512, row_multiple=4, **kwargs):
  return token_budget_plan(pairs, batch_tokens=batch_tokens, max_length=MAX_LENGTH, row_multiple=row_multiple,
                           seed=3, **kwargs)


def test_bucket_lengths_and_rows_fit_the_budget():
  assert buckets.bucket_lengths(64).tolist() == [8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64]
  assert buckets.bucket_lengths(6).tolist() == [6]
  lengths = buckets.bucket_lengths(256)
  assert len(lengths) == 21 and lengths[-1] == 256
  rows = buckets.bucket_rows(2048, buckets.bucket_lengths(64), 8)
  assert rows.tolist() == [256, 200, 168, 144, 128, 96, 80, 72, 64, 48, 40, 32, 32]
  assert (rows * buckets.bucket_lengths(64) <= 2048).all() and (rows % 8 == 0).all()
  with pytest.raises(ValueError, match="raise data.batch_tokens to at least 512 or lower data.max_length"):
    buckets.bucket_rows(500, buckets.bucket_lengths(64), 8)


def test_budget_never_exceeded_shapes_fixed_and_every_example_once_per_epoch():
  pairs = _pairs(range(600))
  plan = _plan(pairs)
  shapes = plan.shapes()
  assert len(shapes) >= 8 and all(rows * length <= 512 and rows % 4 == 0 for rows, length in shapes)
  batches = list(token_budget_dataset(pairs, plan, num_epochs=2))
  assert len(batches) == 2 * plan.batches_per_epoch
  epochs = []
  for epoch in range(2):
    seen = []
    for batch in batches[epoch * plan.batches_per_epoch:(epoch + 1) * plan.batches_per_epoch]:
      assert batch["inputs"].shape in shapes and all(v.shape == batch["inputs"].shape for v in batch.values())
      assert (batch["inputs"] != 0).sum() <= 512 and (batch["targets"] != 0).sum() <= 512
      seen += _examples(batch)
    assert sorted(seen) == list(range(600))  # no example dropped, none twice.
    epochs.append(seen)
  assert epochs[0] != epochs[1]  # reshuffled each epoch.
  # Rows of a batch come from one bucket: each example fits its batch's length, and would not fit the next shorter.
  lengths = np.maximum(np.diff(pairs.inputs_offsets), np.diff(pairs.targets_offsets))
  for batch in batches[:plan.batches_per_epoch]:
    length = batch["inputs"].shape[1]
    shorter = plan.lengths[plan.lengths < length].max(initial=0)
    assert all(shorter < lengths[i] <= length for i in _examples(batch))


def test_padding_far_below_the_padded_baseline():
  pairs = _pairs(range(2000))

  def padding(batches):
    real = sum(int((b[f] != 0).sum()) for b in batches for f in pipeline.FEATURES)
    return 1 - real / sum(b[f].size for b in batches for f in pipeline.FEATURES)

  budget = padding(token_budget_dataset(pairs, _plan(pairs, batch_tokens=1024), num_epochs=1))
  padded = padding(pipeline.train_dataset(pairs, batch_size=16, max_length=MAX_LENGTH, packing=False, num_epochs=1))
  assert padded > 0.7 and budget < 0.35 and budget < padded / 2


@pytest.mark.parametrize("prefetch", [0, 2])
def test_resumed_iterator_gives_the_same_batches(prefetch):
  pairs = _pairs(range(300))
  plan = _plan(pairs)
  ds = token_budget_dataset(pairs, plan, prefetch=prefetch)
  it = iter(ds)
  for _ in range(plan.batches_per_epoch - 2):  # the resumed part crosses into the next epoch.
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(5)]
  resumed = iter(ds)
  resumed.set_state(state)
  for want, got in zip(expected, [next(resumed) for _ in range(5)], strict=True):
    assert set(want) == set(got) and all(np.array_equal(want[k], got[k]) for k in want)


def test_two_hosts_make_equal_shapes_step_by_step_and_share_the_epoch(monkeypatch):
  shards = [_pairs(range(index, 501, 2), seed=index) for index in range(2)]
  own = [buckets.TokenBudgetPlan(np.diff(p.inputs_offsets), np.diff(p.targets_offsets), batch_tokens=512,
                                 max_length=MAX_LENGTH, row_multiple=8, shard_count=2).own_batches for p in shards]
  assert (own[0] != own[1]).any()  # the hosts' length distributions differ: they must agree on the schedule.
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  monkeypatch.setattr(hosts.multihost_utils, "process_allgather", lambda counts: np.stack(own))
  plans = [_plan(p, row_multiple=8, shard_count=2) for p in shards]
  np.testing.assert_array_equal(plans[0].batches_per_bucket, np.maximum(*own))
  assert plans[0].batches_per_epoch == plans[1].batches_per_epoch
  steps = [list(token_budget_dataset(p, plan, num_epochs=2)) for p, plan in zip(shards, plans)]
  seen = collections.Counter()
  for a, b in zip(*steps, strict=True):
    assert a["inputs"].shape == b["inputs"].shape  # equal shapes at every step.
    rows, length = a["inputs"].shape
    assert rows * 2 * length <= 512  # the global batch (both hosts) within the budget.
    seen.update(_examples(a) + _examples(b))
  assert seen == {i: 2 for i in range(501)}  # two epochs: every example of both hosts twice.


def test_simulated_hosts_without_their_processes_are_refused():
  with pytest.raises(ValueError, match="token-budget batches of shard_count=2 hosts need one process per host"):
    _plan(_pairs(range(50)), shard_count=2)


def test_config_refuses_packing_with_batch_tokens_and_language_models():
  demo = REPO / "configs" / "small.py"
  with pytest.raises(ValueError, match=r"data.batch_tokens=4096 and data.packing=True .* set data.packing=False"):
    config_lib.validate(config_lib.load(demo, {"data.batch_tokens": 4096}))
  config_lib.validate(config_lib.load(demo, {"data.batch_tokens": 4096, "data.packing": False}))
  with pytest.raises(ValueError, match="model.architecture='lm' rows are always full .* set data.batch_tokens=0"):
    config_lib.validate(config_lib.load(REPO / "configs" / "lm_demo.py",
                                        {"data.batch_tokens": 4096, "data.packing": False}))
  with pytest.raises(ValueError, match="data.batch_tokens=-1 must be at least 0"):
    config_lib.validate(config_lib.load(demo, {"data.batch_tokens": -1}))
  assert config_lib.is_identity("data.batch_tokens")  # the data order of a checkpoint depends on it.
  with pytest.raises(ValueError, match="use packing=False with batch_tokens"):
    pipeline.make_datasets(dataset="parallel_text", tokenizer=None, batch_size=8, max_length=16, batch_tokens=256)


@pytest.mark.parametrize("config_file", ["wmt14_ende_base.py", "wmt14_ende_big.py"])
def test_wmt14_configs_state_the_papers_token_budget(config_file):
  config = config_lib.load(REPO / "configs" / config_file)
  config_lib.validate(config)
  assert config.data.batch_tokens == 25_000 and not config.data.packing and config.data.max_length == 256
  assert buckets.bucket_rows(25_000, buckets.bucket_lengths(256), 8).tolist()[-1] == 96  # 96 x 256 <= 25,000.


@pytest.mark.slow
def test_bundled_corpus_steps_hold_close_to_the_budget(tmp_path):
  data_dir = str(tmp_path / "tfds")
  train = sources.load_split("parallel_text", "train", data_dir=data_dir)
  tok = get_tokenizer(str(tmp_path / "spm_8000.model"), lambda: sources.pair_texts(train), vocab_size=8000)
  budget = 2048  # One CPU device: rows are multiples of 1 (with 8 devices, multiples of 8: 88.9% of the budget).
  data = pipeline.make_datasets(dataset="parallel_text", data_dir=data_dir, tokenizer=tok, batch_size=64,
                                max_length=64, packing=False, batch_tokens=budget, prefetch=0)
  plan = token_budget_plan(data.train_pairs, batch_tokens=budget, max_length=64)
  lengths = np.maximum(np.diff(data.train_pairs.inputs_offsets), np.diff(data.train_pairs.targets_offsets))
  counted = [lengths[plan.batch(i)[0]].sum() for i in range(plan.batches_per_epoch)]  # max(src, tgt) per example.
  batches = [next(data.train) for _ in range(200)]
  sides = pipeline.real_tokens(batches)
  print(f"budget {budget}: max(src, tgt) per step {np.mean(counted):.0f} ({np.mean(counted) / budget:.1%}), "
        f"source {sides['inputs']:.0f}, target {sides['targets']:.0f}; {len(plan.shapes())} shapes")
  assert max(counted) <= budget and 0.9 * budget <= np.mean(counted)
  assert max(int((b[f] != 0).sum()) for b in batches for f in pipeline.FEATURES) <= budget
  assert 0.75 * budget <= sides["inputs"] < sides["targets"] <= budget  # German targets are the longer side.
  assert "real tokens per step: " in data.describe(64) and "13 shapes [256, 8] ... [32, 64]" in data.describe(64)
  # The wmt14 configs' 25,000 (quoted there): fewer batches per epoch, so the buckets' last batches weigh more.
  plan = token_budget_plan(data.train_pairs, batch_tokens=25_000, max_length=64)
  examples = [plan.batch(i)[0] for i in range(plan.batches_per_epoch)]
  fill = {f: np.mean([np.diff(getattr(data.train_pairs, f"{f}_offsets"))[e].sum() for e in examples]) / 25_000
          for f in pipeline.FEATURES}
  print(f"budget 25000: source {fill['inputs']:.1%}, target {fill['targets']:.1%}")
  assert 0.7 < fill["inputs"] < fill["targets"] < 0.85


@pytest.mark.slow  # ~3 minutes on 2 shared cores: three runs, each compiling a step per new bucket shape.
def test_jformer_train_with_a_token_budget_resumes_exactly(tiny_corpus, tmp_path, capsys):
  from jformer import main

  overrides = tiny_overrides(tiny_corpus, **{"data.batch_tokens": 512, "data.packing": False})
  args = [f"--config.{key}={value}" for key, value in overrides.items()]
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  main.main(["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={straight}", *args])
  out = capsys.readouterr().out
  assert "real tokens per step: " in out and "shapes [64, 8] ... [16, 32]" in out
  main.main(["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={resumed}", *args,
             "--config.train.steps=3"])
  main.main(["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={resumed}", *args])
  assert "resumed from step 3" in capsys.readouterr().out
  results = [json.loads((run / "results.json").read_text()) for run in (straight, resumed)]
  assert results[0]["step"] == results[1]["step"] == 6 and os.path.exists(straight / "checkpoints")
  assert results[0]["train_loss"] == pytest.approx(results[1]["train_loss"], abs=1e-6)


@pytest.mark.slow  # two processes of one job on 2 shared cores.
def test_two_processes_agree_on_the_bucket_schedule_and_train(tiny_corpus, tmp_path):
  results = finish_processes(train_processes(tmp_path / "run", tiny_corpus, tmp_path, 2,
                           **{"train.steps": 4, "data.batch_tokens": 256, "data.packing": False}))
  for index, (code, out, err) in enumerate(results):
    assert code == 0, f"process {index} failed:\n{out}\n{err[-3000:]}"
  # 2 devices: rows are multiples of 2 and each host builds half of them; 256 // 32 = 8 rows of 32 -> 4 per host.
  assert "real tokens per step on this host: " in results[0][1] and "shapes [16, 8] ... [4, 32])" in results[0][1]
