"""A SentencePiece vocabulary shared by the source and the target language (paper Sec. 5.1).

Token ids (`jformer.ops.tokens`): pad = 0, eos = 1, unk = 2, no bos. `encode` appends EOS, `decode` stops at the
first EOS. The trained model is cached at a path and reused when it exists, so a resumed run keeps its vocabulary.
"""

from __future__ import annotations

import io
import os
import random
from typing import Callable, Iterable, Sequence

import numpy as np
import sentencepiece as spm
from absl import logging
from etils import epath

from jformer import paths
from jformer.ops.tokens import EOS_ID, PAD_ID, UNK_ID


class Tokenizer:
  """Encodes text to int ids and back; pickles as its serialized model (cheap to send to grain workers).

  Attributes:
    model_proto: the serialized SentencePiece `ModelProto`.
    vocab_size: number of ids, pad/eos/unk included.
  """

  def __init__(self, model_proto: bytes):
    self.model_proto = model_proto
    self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
    self._scores = None  # Piece log-probabilities, read on the first `sample` (the unigram model's).
    ids = (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id(), self._sp.bos_id())
    if ids != (PAD_ID, EOS_ID, UNK_ID, -1):
      raise ValueError(f"SentencePiece model has (pad, eos, unk, bos) ids {ids}; jformer needs "
                       f"({PAD_ID}, {EOS_ID}, {UNK_ID}, -1). Retrain it with `train_tokenizer` (delete the cached "
                       "file).")

  @classmethod
  def from_file(cls, path: epath.PathLike) -> Tokenizer:
    """Loads a `.model` file written by `train_tokenizer` (a local path or any `etils.epath` one, e.g. gs://).

    Raises:
      ValueError: the file is not a SentencePiece model (truncated, overwritten), naming it.
    """
    try:
      return cls(epath.Path(path).read_bytes())
    except RuntimeError as e:  # SentencePiece cannot parse the bytes.
      raise ValueError(f"{os.fspath(path)} is not a readable SentencePiece model ({str(e).splitlines()[0]}); "
                       "restore it, or delete it to train the vocabulary again (in a new --workdir: the "
                       "parameters of a run belong to its vocabulary)") from None

  def __getstate__(self) -> dict:
    return {"model_proto": self.model_proto}

  def __setstate__(self, state: dict) -> None:
    self.__init__(state["model_proto"])

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`, ending with EOS."""
    return self._sp.encode(text, add_eos=True)

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    """`encode` of each text (multi-threaded in SentencePiece)."""
    return self._sp.encode(list(texts), add_eos=True)

  def sample(self, text: str, rng: np.random.Generator, *, alpha: float, nbest: int) -> list[int]:
    """Token ids of one segmentation of `text` drawn at random, ending with EOS: subword regularisation (Kudo 2018,
    l-best sampling, Sec. 3.3): of the `nbest` most probable segmentations x under the unigram model, x is drawn
    with probability proportional to P(x)^alpha (alpha -> 0: uniform over them; large: the best one, `encode`).
    `rng` makes the draw reproducible (the pipeline derives it from the data seed and the example's index)."""
    if self._scores is None:
      self._scores = np.array([self._sp.get_score(i) for i in range(self.vocab_size)], np.float64)
    try:
      candidates = self._sp.nbest_encode(text, nbest_size=nbest)
    except RuntimeError as e:  # a BPE model (data.vocab_path) has no n-best segmentations.
      raise ValueError(f"subword sampling draws from a unigram SentencePiece model's n-best segmentations; this "
                       f"model cannot ({str(e).splitlines()[0]}): set data.subword_sampling=0, or train the "
                       "vocabulary with jformer (unigram)") from None
    if len(candidates) < 2:
      chosen = candidates[0] if candidates else []
    else:
      log_p = alpha * np.array([self._scores[ids].sum() for ids in candidates])  # log P(x)^alpha.
      weights = np.exp(log_p - log_p.max())
      chosen = candidates[rng.choice(len(candidates), p=weights / weights.sum())]
    return list(chosen) + [EOS_ID]

  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    """Text of `ids` (1-D), up to the first EOS; pads are skipped."""
    ids = [int(i) for i in ids]
    if EOS_ID in ids:
      ids = ids[:ids.index(EOS_ID)]
    return self._sp.decode([i for i in ids if i != PAD_ID])

  def decode_batch(self, ids: np.ndarray | Sequence[Sequence[int]]) -> list[str]:
    """`decode` of each row of `ids` (`[batch, length]`)."""
    return [self.decode(row) for row in ids]


def sample_sentences(texts: Iterable[str], max_sentences: int, seed: int = 0) -> list[str]:
  """At most `max_sentences` texts, a uniform sample (reservoir sampling) that depends only on `seed`."""
  rng = random.Random(seed)
  sample = []
  for n, text in enumerate(texts):
    if n < max_sentences:
      sample.append(text)
    else:
      j = rng.randrange(n + 1)
      if j < max_sentences:
        sample[j] = text
  return sample


def train_tokenizer(texts: Iterable[str], *, vocab_size: int, model_type: str = "unigram",
                    character_coverage: float = 0.9995, max_sentences: int = 1_000_000, seed: int = 0,
                    lossless: bool = False) -> Tokenizer:
  """Trains a SentencePiece model in memory.

  Args:
    texts: training sentences (source and target sides together for a shared vocabulary).
    vocab_size: number of ids, pad/eos/unk included.
    model_type: SentencePiece model type ("unigram", "bpe", "char", "word").
    character_coverage: fraction of characters the vocabulary covers; the rest map to unk.
    max_sentences: train on a seeded sample of at most this many sentences.
    seed: seed of that sample.
    lossless: `decode(encode(text)) == text` for every text: characters outside the vocabulary fall back to their
      UTF-8 bytes (no unk), and nothing is normalized (no NFKC, spaces and newlines kept). A language model needs
      it so that its bits per byte charge every byte of the text, not a normalized or unk-collapsed version of it.
  """
  sentences = sample_sentences(texts, max_sentences, seed)
  exact = dict(byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False)
  if not sentences:
    raise ValueError("no sentences to train the tokenizer on: `texts` is empty (check the training split).")
  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=vocab_size, model_type=model_type,
        character_coverage=character_coverage, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        input_sentence_size=0, num_threads=os.cpu_count() or 1, minloglevel=2, **(exact if lossless else {}))
  except RuntimeError as e:
    raise ValueError(f"SentencePiece training failed ({len(sentences)} sentences, vocab_size={vocab_size}, "
                     f"model_type={model_type!r}): {str(e).strip().rstrip('.;')}; "
                     f"{_training_advice(str(e), sentences, lossless)}.") from e
  return Tokenizer(model.getvalue())


# SentencePiece's trainer skips sentences longer than this many bytes (its `max_sentence_length` default).
MAX_SENTENCE_BYTES = 4192


def _training_advice(error: str, sentences: list[str], lossless: bool) -> str:
  """The fix for a failed SentencePiece training, from its cause: lines it skipped for their length (all of them:
  nothing left to train on), characters that do not fit the vocabulary, a vocabulary larger than the text has
  pieces for, or a text without characters."""
  lengths = [len(sentence.encode("utf-8")) for sentence in sentences]
  too_long = sum(length > MAX_SENTENCE_BYTES for length in lengths)
  if too_long and ("sentences_.empty()" in error or too_long == len(sentences)):
    return (f"SentencePiece skips lines longer than {MAX_SENTENCE_BYTES:,} bytes, and {too_long} of the "
            f"{len(sentences)} training lines are (the longest has {max(lengths):,}), which left nothing to train "
            "on, whatever model.vocab_size: break the text into lines of a sentence or a paragraph each")
  if "smaller than required_chars" in error:
    return ("raise model.vocab_size: it must hold every character of the corpus"
            + (" and 256 byte pieces (a lossless vocabulary)" if lossless else ""))
  if "Vocabulary size too high" in error:
    return "the training text has too few distinct pieces for it: lower model.vocab_size to the value named, or add text"
  if "all_chars_count" in error:
    return "the training text has no characters to learn pieces from: check the training split's files"
  return "check the training split's text and model.vocab_size"


def get_tokenizer(path: epath.PathLike, texts_fn: Callable[[], Iterable[str]], *, vocab_size: int,
                  model_type: str = "unigram", character_coverage: float = 0.9995, max_sentences: int = 1_000_000,
                  seed: int = 0, lossless: bool = False) -> Tokenizer:
  """The tokenizer cached at `path` (e.g. `<workdir>/vocab/spm_8000.model`), trained and written there if missing.

  Args:
    path: the cache file, local or any `etils.epath` path (gs://...); reused as is when it exists (`texts_fn` is
      then not called). The model is trained in memory and written as bytes (no local file needed).
    texts_fn: returns the training sentences; called only to train.
    vocab_size, model_type, character_coverage, max_sentences, seed, lossless: see `train_tokenizer`.

  Raises:
    ValueError: the cached model's vocabulary size differs from `vocab_size`.
  """
  path = epath.Path(path)
  if path.exists():
    tokenizer = Tokenizer.from_file(path)
    if tokenizer.vocab_size != vocab_size:
      raise ValueError(f"cached tokenizer {path} has vocab_size {tokenizer.vocab_size}, but {vocab_size} was asked "
                       "for. Use another path for the new size, or delete the file to retrain.")
    logging.info("Reusing tokenizer %s (vocab_size=%d).", path, vocab_size)
    return tokenizer
  tokenizer = train_tokenizer(texts_fn(), vocab_size=vocab_size, model_type=model_type,
                              character_coverage=character_coverage, max_sentences=max_sentences, seed=seed,
                              lossless=lossless)
  paths.write_atomically(path, tokenizer.model_proto)
  logging.info("Trained tokenizer %s (vocab_size=%d, model_type=%s).", path, vocab_size, model_type)
  return tokenizer

