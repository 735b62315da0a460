"""grain pipelines: packing, padding, sharding, resumable iteration, long-example counting, make_datasets."""

from __future__ import annotations

import collections
import logging
import os
import time

import numpy as np
import pytest

from jformer.data import pipeline, sources
from jformer.data.pipeline import BATCH_KEYS, TokenizedPairs, eval_dataset, tokenize_pairs, train_dataset
from jformer.data.tokenizer import EOS_ID, get_tokenizer, train_tokenizer

MAX_LENGTH = 16


def _pairs(n: int = 200, seed: int = 0) -> TokenizedPairs:
  """Example i: inputs [i+3]*k + [EOS], targets [i+3]*m + [EOS] (k, m random), so every token names its example."""
  rng = np.random.default_rng(seed)
  rows = {f: [[i + 3] * int(rng.integers(1, MAX_LENGTH)) + [EOS_ID] for i in range(n)] for f in pipeline.FEATURES}
  (inputs, inputs_offsets), (targets, targets_offsets) = (pipeline.ragged(rows[f]) for f in pipeline.FEATURES)
  return TokenizedPairs(inputs, inputs_offsets, targets, targets_offsets)


def _segments(batches) -> list[int]:
  """Example ids of every (row, segment) of `batches`, after checking each segment's tokens, ids and positions."""
  found = []
  for batch in batches:
    assert set(batch) == set(BATCH_KEYS)
    assert all(v.dtype == np.int32 and v.shape[1] == MAX_LENGTH for v in batch.values())
    for row in range(len(batch["inputs"])):
      for f in pipeline.FEATURES:
        tokens, seg, pos = (batch[f"{f}{s}"][row] for s in ("", "_segmentation", "_position"))
        np.testing.assert_array_equal(seg != 0, tokens != 0)
        np.testing.assert_array_equal(pos[seg == 0], 0)
        ids = seg[seg != 0]
        assert (np.diff(ids) >= 0).all() and set(ids) == set(range(1, ids.max(initial=0) + 1))
      n_segments = batch["inputs_segmentation"][row].max()
      assert batch["targets_segmentation"][row].max() == n_segments
      for s in range(1, n_segments + 1):
        example = {f: batch[f][row][batch[f"{f}_segmentation"][row] == s] for f in pipeline.FEATURES}
        for f in pipeline.FEATURES:
          np.testing.assert_array_equal(batch[f"{f}_position"][row][batch[f"{f}_segmentation"][row] == s],
                                        np.arange(len(example[f])))
          assert example[f][-1] == EOS_ID and (example[f][:-1] == example["inputs"][0]).all()
        assert example["targets"][0] == example["inputs"][0]
        found.append(int(example["inputs"][0]) - 3)
  return found


def test_packing_keeps_every_example_exactly_once():
  pairs = _pairs()
  batches = list(train_dataset(pairs, batch_size=8, max_length=MAX_LENGTH, packing=True, num_epochs=1,
                               drop_remainder=False))
  found = _segments(batches)
  assert sorted(found) == list(range(len(pairs)))
  tokens = sum(int((b[f] != 0).sum()) for b in batches for f in pipeline.FEATURES)
  assert tokens == pairs.num_tokens()
  rows = sum(len(b["inputs"]) for b in batches)
  assert rows < 0.9 * len(pairs)  # Packed: fewer rows than examples.


def test_padding_puts_one_example_per_row():
  pairs = _pairs(50)
  batches = list(train_dataset(pairs, batch_size=8, max_length=MAX_LENGTH, packing=False, num_epochs=1))
  assert all(b["inputs"].shape == (8, MAX_LENGTH) for b in batches) and len(batches) == 50 // 8
  assert all(b[f"{f}_segmentation"].max(axis=1).tolist() == [1] * 8 for b in batches for f in pipeline.FEATURES)
  found = _segments(batches)
  assert len(found) == len(set(found)) == 48


def test_shuffle_is_seeded_and_differs_per_epoch():
  pairs = _pairs(40)

  def order(seed):
    return _segments(train_dataset(pairs, batch_size=4, max_length=MAX_LENGTH, packing=False, seed=seed,
                                   num_epochs=2))

  first = order(seed=1)
  assert first == order(seed=1) != order(seed=2)
  assert sorted(first[:40]) == sorted(first[40:]) == list(range(40)) and first[:40] != first[40:]


@pytest.mark.parametrize("packing, prefetch", [(True, 0), (False, 0), (True, 2)])
def test_resumed_iterator_gives_the_same_batches(packing, prefetch):
  ds = train_dataset(_pairs(), batch_size=6, max_length=MAX_LENGTH, packing=packing, seed=7, prefetch=prefetch)
  it = iter(ds)
  for _ in range(5):
    next(it)
  state = it.get_state()
  expected = [next(it) for _ in range(5)]
  resumed = iter(ds)
  resumed.set_state(state)
  for want, got in zip(expected, [next(resumed) for _ in range(5)]):
    assert set(want) == set(got) and all(np.array_equal(want[k], got[k]) for k in want)


def test_forever_by_default():
  it = iter(train_dataset(_pairs(10), batch_size=4, max_length=MAX_LENGTH, packing=False))
  assert len(_segments(next(it) for _ in range(30))) == 120


def test_prefetch_builds_batches_ahead_in_a_thread_and_keeps_the_order():
  pairs = _pairs()
  plain = iter(train_dataset(pairs, batch_size=6, max_length=MAX_LENGTH, seed=3))
  prefetched = iter(train_dataset(pairs, batch_size=6, max_length=MAX_LENGTH, seed=3, prefetch=2))
  first = next(prefetched)
  deadline = time.monotonic() + 10
  while prefetched._buffer.qsize() < 2 and time.monotonic() < deadline:  # the thread fills the buffer on its own.
    time.sleep(0.01)
  assert prefetched._buffer.qsize() == 2
  for want, got in zip([next(plain) for _ in range(4)], [first] + [next(prefetched) for _ in range(3)]):
    assert all(np.array_equal(want[k], got[k]) for k in BATCH_KEYS)


def test_eval_keeps_order_and_pads_to_the_largest_host():
  pairs = _pairs(23)
  batches = list(eval_dataset(pairs, batch_size=4, max_length=MAX_LENGTH))
  assert len(batches) == 6 and _segments(batches) == list(range(23))  # 23 examples, then 1 padding row.
  host = list(eval_dataset(_pairs(11), batch_size=4, max_length=MAX_LENGTH, min_examples=12))
  assert len(host) == 3  # ceil(12 / 4): as many batches as the host with 12 examples.
  last = host[-1]  # 11 examples in 12 rows: the last row is all padding.
  assert last["inputs_segmentation"][-2].any() and not any(last[k][-1].any() for k in BATCH_KEYS)


class _WordTokenizer:
  """One token (id 5) per whitespace-separated word, then EOS."""

  def encode_batch(self, texts):
    return [[5] * len(text.split()) + [EOS_ID] for text in texts]


TEXTS = [{"inputs": "a b", "targets": "c"}, {"inputs": "a b c d e", "targets": "c"},
         {"inputs": "a", "targets": "c d e f g h"}, {"inputs": "a b c", "targets": "d e f"}]


def test_long_pairs_are_dropped_counted_and_logged(caplog):
  with caplog.at_level(logging.INFO, logger="absl"):  # whatever verbosity an earlier CLI test left to absl.
    pairs = tokenize_pairs(TEXTS, _WordTokenizer(), max_length=4, name="toy/train")
  assert (len(pairs), pairs.dropped, pairs.truncated) == (2, 2, 0)
  assert "toy/train: dropped 2 of 4 pairs longer than max_length=4." in caplog.text
  assert [pairs[i]["inputs"].tolist() for i in range(2)] == [[5, 5, EOS_ID], [5, 5, 5, EOS_ID]]


def test_long_pairs_are_truncated_counted_and_logged(caplog):
  with caplog.at_level(logging.INFO, logger="absl"):  # whatever verbosity an earlier CLI test left to absl.
    pairs = tokenize_pairs(TEXTS, _WordTokenizer(), max_length=4, long_examples="truncate", name="toy/valid")
  assert (len(pairs), pairs.dropped, pairs.truncated) == (4, 0, 2)
  assert "toy/valid: truncated 2 of 4 pairs longer than max_length=4." in caplog.text
  assert pairs[1]["inputs"].tolist() == [5, 5, 5, EOS_ID] and pairs[2]["targets"].tolist() == [5, 5, 5, EOS_ID]
  with pytest.raises(ValueError, match="long_examples='cut'; use one of"):
    tokenize_pairs(TEXTS, _WordTokenizer(), max_length=4, long_examples="cut")


def test_make_datasets_on_a_parallel_text_folder(tmp_path):
  folder = tmp_path / "corpus"
  folder.mkdir()
  lines = {"src": [f"line {i} of the {w} text" for i, w in enumerate(["first", "second", "third"] * 20)],
           "tgt": [f"Zeile {i} des {w} Textes" for i, w in enumerate(["ersten", "zweiten", "dritten"] * 20)]}
  for split in sources.SPLITS:
    for side, texts in lines.items():
      (folder / f"{split}.{side}").write_text("\n".join(texts) + "\n")
  tok = train_tokenizer(lines["src"] + lines["tgt"], vocab_size=45)
  data = pipeline.make_datasets(dataset="parallel_text", path=str(folder), data_dir=str(tmp_path / "tfds"),
                                tokenizer=tok, batch_size=4, max_length=32, seed=0, shard_index=0, shard_count=1)
  batch = next(data.train)
  assert set(batch) == set(BATCH_KEYS) and all(v.shape == (4, 32) for v in batch.values())
  assert tok.decode(batch["inputs"][0][batch["inputs_segmentation"][0] == 1]) in lines["src"]
  eval_batches = list(data.eval_batches("valid"))
  assert len(eval_batches) == 15 and tok.decode(eval_batches[0]["targets"][0]) == lines["tgt"][0]
  assert data.raw_split("test") == (lines["src"], lines["tgt"])


class _NumberTokenizer:
  """Token int(word) + 3 for each word (so example i is all i + 3, as in `_pairs`), then EOS; records what it
  encodes."""

  def __init__(self):
    self.texts = []

  def encode_batch(self, texts):
    self.texts.extend(texts)
    return [[int(word) + 3 for word in text.split()] + [EOS_ID] for text in texts]


def _numbered_corpus(folder, sizes: dict[str, int]):
  """Line i of every file is the number i, repeated 1 to 5 (src) or 1 to 3 (tgt) times."""
  folder.mkdir()
  for split in sources.SPLITS:
    for side, repeats in (("src", 5), ("tgt", 3)):
      (folder / f"{split}.{side}").write_text("".join(" ".join([str(i)] * (1 + i % repeats)) + "\n"
                                                      for i in range(sizes[split])))
  return str(folder)


@pytest.mark.parametrize("packing", [True, False])
def test_each_host_reads_tokenizes_and_trains_on_its_own_shard(tmp_path, packing):
  folder = _numbered_corpus(tmp_path / "corpus", {"train": 101, "valid": 23, "test": 5})
  hosts = []
  for index in range(2):
    tok = _NumberTokenizer()
    data = pipeline.make_datasets(dataset="parallel_text", path=folder, data_dir=str(tmp_path / "tfds"),
                                  tokenizer=tok, batch_size=4, max_length=MAX_LENGTH, packing=packing,
                                  num_epochs=1, shard_index=index, shard_count=2)
    mine = list(range(index, 101, 2))
    # Tokenized: this host's shard only, both sides of each pair.
    assert sorted(int(t.split()[0]) for t in tok.texts) == sorted(mine * 2)
    assert [pair["inputs"][0] - 3 for pair in data.train_pairs] == mine
    trained = _segments(data.train)
    assert set(trained) <= set(mine) and len(trained) == len(set(trained)) > 0.8 * len(mine)
    tok.texts.clear()
    valid = list(data.eval_batches("valid"))
    assert sorted(int(t.split()[0]) for t in tok.texts) == sorted(list(range(index, 23, 2)) * 2)
    assert len(valid) == 3 and _segments(valid) == list(range(index, 23, 2))  # ceil(12 / 4) batches on each.
    first = list(train_dataset(data.train_pairs, batch_size=4, max_length=MAX_LENGTH, packing=packing,
                               num_epochs=1))[:8]
    tokens = {f: np.mean([(b[f] != 0).sum() for b in first]) for f in pipeline.FEATURES}
    assert data.tokens_per_step == tokens and tokens["inputs"] > 4
    assert data.describe(MAX_LENGTH) == (f"data: {len(mine)} training pairs ({data.train_pairs.num_tokens()} "
                                         f"tokens), 0 dropped as longer than {MAX_LENGTH} tokens, host {index} of 2 "
                                         f"(101 pairs in the split); real tokens per step on this host: "
                                         f"{tokens['inputs']:,.0f} source, {tokens['targets']:,.0f} target "
                                         f"(batches [4, {MAX_LENGTH}])")
    hosts.append(set(trained))
  assert not hosts[0] & hosts[1]
  with pytest.raises(ValueError, match=r"shard_index=2 is not in \[0, shard_count=2\)"):
    pipeline.make_datasets(dataset="parallel_text", path=folder, data_dir=str(tmp_path / "tfds"),
                           tokenizer=_NumberTokenizer(), batch_size=4, max_length=MAX_LENGTH, shard_index=2,
                           shard_count=2)


@pytest.mark.slow
def test_bundled_corpus_end_to_end_throughput(tmp_path):
  data_dir = str(tmp_path / "tfds")
  train = sources.load_split("parallel_text", "train", data_dir=data_dir)
  tok = get_tokenizer(str(tmp_path / "spm_8000.model"), lambda: sources.pair_texts(train), vocab_size=8000)
  data = pipeline.make_datasets(dataset="parallel_text", data_dir=data_dir, tokenizer=tok, batch_size=64,
                                max_length=64, packing=True, shard_index=0, shard_count=1)
  assert data.train_pairs.dropped < 0.02 * len(train)
  start = time.process_time()  # CPU seconds (every thread's): what the pipeline costs, whatever else runs beside it.
  batches = [next(data.train) for _ in range(100)]
  seconds = time.process_time() - start
  tokens = sum(int((b["inputs"] != 0).sum() + (b["targets"] != 0).sum()) for b in batches)
  # 10x what the training loop consumes on 2 CPU cores; ~400k tokens per CPU second on one of them (5x the floor).
  assert tokens / seconds > 80_000
  segments = collections.Counter(int(b["inputs_segmentation"].max()) for b in batches)
  assert min(segments) > 1
  assert os.path.exists(os.path.join(sources.bundled_corpus_path(), "train.src.gz"))
