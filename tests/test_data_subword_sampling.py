"""Subword regularisation (`data.subword_sampling`): draws that spell the same text, in proportion to P(x)^alpha,
the same pairs in the same order as without, reproducible and resumable, never at evaluation."""

import collections
import itertools

import numpy as np
import pytest

from helpers import load_tiny
from jformer.data import pipeline
from jformer.data.tokenizer import EOS_ID, train_tokenizer

TEXT = "Save the file before closing the application window."


@pytest.fixture(scope="module")
def corpus(tiny_corpus):
  return {side: (tiny_corpus / f"train.{side}").read_text(encoding="utf-8").splitlines() for side in ("src", "tgt")}


@pytest.fixture(scope="module")
def tokenizer(corpus):
  return train_tokenizer(corpus["src"] + corpus["tgt"], vocab_size=300)


@pytest.fixture(scope="module")
def pairs(corpus, tokenizer):
  source = [{"inputs": s, "targets": t} for s, t in zip(corpus["src"], corpus["tgt"])]
  return pipeline.tokenize_pairs(source, tokenizer, max_length=32, keep_texts=True)


def test_every_draw_spells_the_text_and_ends_with_eos(tokenizer):
  rng = np.random.default_rng(0)
  draws = [tokenizer.sample(TEXT, rng, alpha=0.1, nbest=16) for _ in range(50)]
  assert all(ids[-1] == EOS_ID and tokenizer.decode(ids) == TEXT for ids in draws)
  assert len({tuple(ids) for ids in draws}) > 5  # segmentations do differ.


def test_draws_follow_p_to_the_alpha_over_the_nbest(tokenizer):
  """Frequencies of the 4 best segmentations against P(x)^alpha / sum: within 4 standard errors of 4000 draws."""
  candidates = tokenizer._sp.nbest_encode(TEXT, nbest_size=4)
  scores = np.array([sum(tokenizer._sp.get_score(i) for i in ids) for ids in candidates])
  alpha = 0.2
  want = np.exp(alpha * (scores - scores.max()))
  want /= want.sum()
  rng = np.random.default_rng(1)
  counts = collections.Counter(tuple(tokenizer.sample(TEXT, rng, alpha=alpha, nbest=4)[:-1]) for _ in range(4000))
  got = np.array([counts[tuple(ids)] for ids in candidates]) / 4000
  assert np.all(np.abs(got - want) < 4 * np.sqrt(want * (1 - want) / 4000) + 1e-9), (got, want)
  best = tokenizer.sample(TEXT, rng, alpha=1e4, nbest=4)  # a large alpha: the best segmentation, `encode`'s.
  assert best == tokenizer.encode(TEXT)


def _texts(batches, tokenizer, feature="inputs"):
  """The texts of every packed example of `batches`, in order."""
  texts = []
  for batch in batches:
    for row, segments in zip(batch[feature], batch[f"{feature}_segmentation"]):
      for segment in range(1, segments.max() + 1):
        texts.append(tokenizer.decode(row[segments == segment]))
  return texts


def _batches(pairs, sampling, count, **kwargs):
  return list(itertools.islice(iter(pipeline.train_dataset(pairs, batch_size=8, max_length=32, seed=3,
                                                           sampling=sampling, **kwargs)), count))


def test_sampled_rows_hold_the_same_pairs_in_the_same_order(pairs, tokenizer):
  sampling = pipeline.SubwordSampling(tokenizer, alpha=0.1, nbest=16)
  plain, sampled = (_batches(pairs, s, 60, packing=False) for s in (None, sampling))  # 480 rows: over 2 passes.
  for feature in ("inputs", "targets"):
    assert _texts(sampled, tokenizer, feature) == _texts(plain, tokenizer, feature)
  changed = sum(not np.array_equal(a, b) for p, s in zip(plain, sampled) for a, b in zip(p["inputs"], s["inputs"]))
  assert changed > 240  # most of the 480 rows are segmented otherwise than the best way.


def test_sampling_is_reproducible_resumable_and_new_each_pass(pairs, tokenizer):
  sampling = pipeline.SubwordSampling(tokenizer, alpha=0.1, nbest=16)
  again = _batches(pairs, sampling, 6)
  assert all(np.array_equal(a[k], b[k]) for a, b in zip(_batches(pairs, sampling, 6), again) for k in a)
  iterator = iter(pipeline.train_dataset(pairs, batch_size=8, max_length=32, seed=3, sampling=sampling))
  for _ in range(3):
    next(iterator)
  state = iterator.get_state()
  resumed = iter(pipeline.train_dataset(pairs, batch_size=8, max_length=32, seed=3, sampling=sampling))
  resumed.set_state(state)
  want, got = next(iterator), next(resumed)
  assert all(np.array_equal(want[k], got[k]) for k in want)
  # Each pair read in pass 1 and in pass 2 (one pair per row, 50 batches a pass): most get another segmentation.
  rows = [(tokenizer.decode(row), tuple(row[row > 0])) for batch in _batches(pairs, sampling, 100, packing=False)
          for row in batch["inputs"]]
  first, second = dict(rows[:400]), dict(rows[400:])
  assert first.keys() == second.keys() and sum(first[text] != second[text] for text in first) > len(first) // 2


def test_a_draw_too_long_for_the_row_falls_back_to_the_best_segmentation(pairs, tokenizer):
  sampling = pipeline.SubwordSampling(tokenizer, alpha=0.0, nbest=64)
  longest = int(np.argmax(np.diff(pairs.inputs_offsets)))
  best = pairs[longest]
  limit = len(best["inputs"])  # the best segmentation fits exactly; uniform draws of 64 are mostly longer.
  drawn = [sampling.segment(pairs, max(limit, len(best["targets"])), longest, np.random.default_rng(s))
           for s in range(20)]
  assert all(len(d["inputs"]) <= max(limit, len(best["targets"])) for d in drawn)
  assert any(np.array_equal(d["inputs"], best["inputs"]) for d in drawn)


def test_sampling_needs_the_texts_and_no_token_budget(pairs, tokenizer):
  without = pipeline.TokenizedPairs(pairs.inputs, pairs.inputs_offsets, pairs.targets, pairs.targets_offsets)
  with pytest.raises(ValueError, match="keep_texts=True"):
    pipeline.train_dataset(without, batch_size=8, max_length=32, sampling=pipeline.SubwordSampling(tokenizer, 0.1, 8))
  with pytest.raises(ValueError, match="subword_sampling=0.1 changes the pairs' lengths"):
    pipeline.make_datasets(dataset="parallel_text", tokenizer=tokenizer, batch_size=8, max_length=32,
                           packing=False, batch_tokens=256, subword_sampling=0.1)


def test_the_config_refuses_sampling_where_it_does_not_apply(tiny_corpus):
  assert load_tiny(tiny_corpus, **{"data.subword_sampling": 0.1}).data.subword_nbest == 64
  with pytest.raises(ValueError, match="data.subword_sampling=0.1 segments translation pairs"):
    load_tiny(tiny_corpus, **{"data.subword_sampling": 0.1, "data.packing": False, "data.batch_tokens": 256})


@pytest.mark.integration  # three short training runs.
def test_jformer_train_with_subword_sampling_resumes_exactly(tiny_corpus, tmp_path, capsys):
  import json

  from helpers import REPO, tiny_overrides
  from jformer import main

  args = [f"--config.{key}={value}" for key, value in
          tiny_overrides(tiny_corpus, **{"data.subword_sampling": 0.1, "data.subword_nbest": 8}).items()]
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  main.main(["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={straight}", *args])
  main.main(["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={resumed}", *args,
             "--config.train.steps=3"])
  main.main(["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={resumed}", *args])
  assert "resumed from step 3" in capsys.readouterr().out
  results = [json.loads((run / "results.json").read_text()) for run in (straight, resumed)]
  assert results[0]["step"] == results[1]["step"] == 6
  assert results[0]["train_loss"] == pytest.approx(results[1]["train_loss"], abs=1e-6)


@pytest.mark.integration  # two tfds builds of the tiny corpus.
def test_evaluation_never_samples(tiny_corpus, tokenizer, tmp_path):
  """With subword sampling on, the training rows are drawn anew, but the valid split's batches are those of a run
  without it, each pair in its best segmentation."""
  from jformer import data

  make = lambda alpha: data.make_datasets(dataset="parallel_text", tokenizer=tokenizer, batch_size=8, max_length=32,
                                          path=str(tiny_corpus), data_dir=str(tmp_path / "tfds"), packing=False,
                                          subword_sampling=alpha, prefetch=0)
  plain, sampled = make(0.0), make(0.1)
  assert not all(np.array_equal(a, b) for a, b in zip(next(plain.train)["inputs"], next(sampled.train)["inputs"]))
  eval_rows = lambda datasets: [batch["inputs"] for batch in datasets.eval_batches("valid")]
  for want, got in zip(eval_rows(plain), eval_rows(sampled), strict=True):
    np.testing.assert_array_equal(got, want)
  sources, _ = sampled.raw_split("valid")
  first = eval_rows(sampled)[0][0]
  assert list(first[first > 0]) == tokenizer.encode(sources[0])  # the best segmentation (sources carry no EOS).
