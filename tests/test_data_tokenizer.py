"""The shared SentencePiece tokenizer: id conventions, round trip on the bundled corpus, cache reuse."""

from __future__ import annotations

import io
import itertools
import os
import pickle
import unicodedata

import pytest
import sentencepiece as spm

from jformer.data import parallel_text, sources
from jformer.data.tokenizer import EOS_ID, PAD_ID, UNK_ID, Tokenizer, get_tokenizer, sample_sentences, train_tokenizer

VOCAB = 1000


def _bundled(split: str, side: str, n: int) -> list[str]:
  path = os.path.join(sources.bundled_corpus_path(), f"{split}.{side}.gz")
  return list(itertools.islice(parallel_text.read_lines(path), n))


@pytest.fixture(scope="module")
def texts() -> list[str]:
  return _bundled("train", "src", 2000) + _bundled("train", "tgt", 2000)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory, texts) -> str:
  path = str(tmp_path_factory.mktemp("vocab") / f"spm_{VOCAB}.model")
  get_tokenizer(path, lambda: texts, vocab_size=VOCAB, max_sentences=3000)
  return path


@pytest.fixture(scope="module")
def tok(model_path) -> Tokenizer:
  return Tokenizer.from_file(model_path)


def test_special_ids_and_vocab_size(tok):
  assert tok.vocab_size == VOCAB
  ids = tok.encode("Show a report on various aspects of the book")
  assert ids[-1] == EOS_ID and EOS_ID not in ids[:-1] and PAD_ID not in ids


def test_model_with_other_special_ids_is_refused(texts):
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(texts[:500]), model_writer=model, vocab_size=100,
                                 minloglevel=2)  # SentencePiece's defaults: unk=0, bos=1, eos=2.
  with pytest.raises(ValueError, match=r"\(pad, eos, unk, bos\) ids \(-1, 2, 0, 1\)"):
    Tokenizer(model.getvalue())


def test_round_trip_on_bundled_valid_split(tok):
  lines = _bundled("valid", "src", 300) + _bundled("valid", "tgt", 300)
  exact = 0
  for line, ids in zip(lines, tok.encode_batch(lines)):
    if UNK_ID not in ids:
      # SentencePiece's nmt_nfkc normalization: NFKC and collapsed whitespace.
      assert tok.decode(ids) == " ".join(unicodedata.normalize("NFKC", line).split())
      exact += 1
  assert exact >= 0.95 * len(lines)


def test_encode_batch_matches_encode(tok):
  lines = _bundled("test", "tgt", 50)
  assert tok.encode_batch(lines) == [tok.encode(line) for line in lines]


def test_decode_stops_at_eos_and_skips_pads(tok):
  ids = tok.encode("the file was not found")
  text = tok.decode(ids)
  assert text == "the file was not found"
  assert tok.decode(ids + [PAD_ID, PAD_ID]) == text
  assert tok.decode([PAD_ID] + ids[:-1] + [EOS_ID, 17, 18]) == text
  assert tok.decode_batch([ids + [0, 0], ids[:-1] + [EOS_ID, 5, 0]]) == [text, text]


def test_pickle_keeps_the_model(tok):
  clone = pickle.loads(pickle.dumps(tok))
  assert clone.model_proto == tok.model_proto and clone.encode("Datei öffnen") == tok.encode("Datei öffnen")


def test_cached_model_is_reused_not_retrained(model_path, tok):
  before = (os.stat(model_path).st_mtime_ns, open(model_path, "rb").read())

  def must_not_train():
    raise AssertionError("texts_fn called: the cached tokenizer was retrained")

  again = get_tokenizer(model_path, must_not_train, vocab_size=VOCAB)
  assert again.model_proto == tok.model_proto
  assert (os.stat(model_path).st_mtime_ns, open(model_path, "rb").read()) == before


def test_cached_model_with_other_vocab_size_fails(model_path):
  with pytest.raises(ValueError, match=f"has vocab_size {VOCAB}, but 2000 was asked"):
    get_tokenizer(model_path, lambda: [], vocab_size=2000)


def test_training_is_deterministic(texts, tok):
  again = train_tokenizer(texts, vocab_size=VOCAB, max_sentences=3000)
  assert again.model_proto == tok.model_proto


def test_sample_sentences_is_seeded_and_capped():
  texts = [f"s{i}" for i in range(100)]
  sample = sample_sentences(texts, 10, seed=1)
  assert len(sample) == 10 and len(set(sample)) == 10 and set(sample) <= set(texts)
  assert sample == sample_sentences(iter(texts), 10, seed=1) != sample_sentences(texts, 10, seed=2)
  assert sample_sentences(texts[:5], 10) == texts[:5]


def test_too_large_vocab_names_the_fix():
  with pytest.raises(ValueError, match="too few distinct pieces for it: lower model.vocab_size"):
    train_tokenizer(["a tiny corpus", "with few pieces"], vocab_size=500)


@pytest.mark.parametrize("vocab_size", [100, 500])
def test_lines_too_long_for_sentencepiece_are_named_whatever_the_vocab_size(vocab_size):
  """A text of lines longer than SentencePiece trains on (it skips them) leaves nothing to train on: the advice
  names the line length, not the vocabulary size."""
  line = " ".join(f"word{i % 997}" for i in range(1000))  # 7,883 bytes.
  with pytest.raises(ValueError, match=r"SentencePiece skips lines longer than 4,192 bytes, and 2 of the 2 training "
                                       r"lines are \(the longest has 7,883\).*whatever model.vocab_size: break the "
                                       "text into lines"):
    train_tokenizer([line, line], vocab_size=vocab_size)


def test_a_lossless_vocabulary_gives_back_every_byte(texts):
  """A language model's vocabulary (`lossless=True`) decodes back to the exact text: newlines, runs of spaces, NFKC
  forms and characters it never saw (UTF-8 byte fallback, no unk); the translation default normalizes them away."""
  documents = ["Line one.\nLine  two\tends here.", "ﬁne ligature, full-width Ａ, emoji 🦉 and Ω≈ç√∫",
               "Ünïcödé — “quotes” and a trailing space "]
  lossless = train_tokenizer(texts, vocab_size=VOCAB, max_sentences=3000, lossless=True)
  default = train_tokenizer(texts, vocab_size=VOCAB, max_sentences=3000)
  for document in documents:
    ids = lossless.encode(document)
    assert UNK_ID not in ids
    assert lossless.decode(ids) == document
  assert [default.decode(default.encode(d)) == d for d in documents] == [False] * 3
  assert UNK_ID in default.encode(documents[1])


def test_a_lossless_vocabulary_too_small_for_its_bytes_names_the_fix(texts):
  with pytest.raises(ValueError, match=r"raise model.vocab_size: it must hold every character of the corpus and 256 "
                                       r"byte pieces \(a lossless vocabulary\)"):
    train_tokenizer(texts, vocab_size=200, max_sentences=3000, lossless=True)


@pytest.mark.integration  # two tfds builds of the tiny corpus and two vocabularies.
def test_a_vocabulary_a_start_without_a_step_trained_on_other_data_is_trained_again(tiny_corpus, tmp_path):
  """A start that failed before its first checkpoint recorded no config.json but may have trained the vocabulary:
  the corrected command, on other data, trains it again for that data (what it was trained on is recorded); once a
  run has a checkpoint (config.json), its vocabulary is never replaced."""
  import json
  import shutil

  from helpers import load_tiny

  from jformer import data

  other = shutil.copytree(tiny_corpus, tmp_path / "other")
  for side in ("src", "tgt"):  # other text: the first 100 pairs only.
    lines = (other / f"train.{side}").read_text().splitlines(keepends=True)
    (other / f"train.{side}").write_text("".join(lines[:100]))
  workdir = tmp_path / "run"
  record = workdir / "vocab" / "vocab_checksum.json"
  first = data.load_tokenizer(load_tiny(tiny_corpus), workdir)
  assert json.loads(record.read_text())["source"]["path"] == str(tiny_corpus)
  second = data.load_tokenizer(load_tiny(other), workdir)
  assert second.model_proto != first.model_proto
  assert json.loads(record.read_text())["source"]["path"] == str(other)
  (workdir / "config.json").write_text("{}")  # a run that saved a checkpoint.
  assert data.load_tokenizer(load_tiny(tiny_corpus), workdir).model_proto == second.model_proto
