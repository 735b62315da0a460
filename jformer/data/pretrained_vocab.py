"""A pretrained model's vocabulary in jformer's ids (`jformer import-hf`): the family's own tokenizer (a Hugging Face
`tokenizers` JSON, a SentencePiece model, or Marian's pair of them with one vocab.json) with its ids renumbered so
that jformer's special ids hold (`jformer.ops.tokens`: 0 pads and starts the decoder, 1 ends every sequence).

jformer id i is pretrained id `VocabularyMap.pretrained_ids[i]`: first the family's start token (jformer 0, what
`shift_right` and the decoders feed first: Llama's <s>, Marian's <pad>) and its end token (jformer 1), then every
other pretrained id in ascending order. A family whose start token is its end token (GPT-2's and Qwen2's
<|endoftext|>) has it twice: jformer then has one id more than the family (0 feeds it, 1 predicts it).

The vocabulary is one file, `<workdir>/vocab/pretrained_vocab.json` (`FILE_NAME`), holding the tokenizer itself, so
its checksum (`jformer.data.workdir.load_tokenizer`) covers everything that turns text into ids.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from typing import Sequence

import numpy as np
from etils import epath

from jformer.ops.tokens import EOS_ID, PAD_ID

FILE_NAME = "pretrained_vocab.json"
KINDS = ("tokenizers", "sentencepiece", "marian")


@dataclasses.dataclass(frozen=True)
class VocabularyMap:
  """jformer ids <-> a pretrained vocabulary's ids (module doc).

  Attributes:
    start_id: the pretrained id of the decoder's first input (jformer 0: BOS, or the family's decoder start).
    end_id: the pretrained id that ends a sequence (jformer 1: EOS).
    size: the pretrained vocabulary size (the rows of its embedding matrix).
  """
  start_id: int
  end_id: int
  size: int

  def __post_init__(self):
    for name in ("start_id", "end_id"):
      if not 0 <= getattr(self, name) < self.size:
        raise ValueError(f"the pretrained {name.removesuffix('_id')} token id {getattr(self, name)} is outside its "
                         f"vocabulary of {self.size} ids")

  @property
  def vocab_size(self) -> int:
    """jformer's vocabulary size: the pretrained one, plus one when the start token is also the end token."""
    return self.size + (self.start_id == self.end_id)

  @property
  def pretrained_ids(self) -> np.ndarray:
    """int64 `[vocab_size]`: the pretrained id of each jformer id (the rows of an embedding in jformer's order)."""
    rest = np.setdiff1d(np.arange(self.size), [self.start_id, self.end_id])
    return np.concatenate([[self.start_id, self.end_id], rest]).astype(np.int64)

  @property
  def jformer_ids(self) -> np.ndarray:
    """int64 `[size]`: the jformer id of each pretrained id (the end token's, 1, when the start token is also the end
    token): the rows of a jformer embedding in the family's order."""
    ids = np.empty(self.size, np.int64)
    ids[self.start_id] = PAD_ID
    ids[self.pretrained_ids[1:]] = np.arange(1, self.vocab_size)  # a start token that also ends: EOS.
    return ids

  def to_jformer(self, pretrained_ids) -> np.ndarray:
    """Pretrained ids (any shape) -> jformer ids."""
    return self.jformer_ids[np.asarray(pretrained_ids, np.int64)]

  def to_pretrained(self, jformer_ids) -> np.ndarray:
    """jformer ids (any shape) -> pretrained ids (0 -> the start token)."""
    return self.pretrained_ids[np.asarray(jformer_ids, np.int64)]


def marian_tokenizer(source_spm: bytes, target_spm: bytes, vocab_json: bytes) -> bytes:
  """The tokenizer `PretrainedTokenizer.write` takes for the kind "marian": Marian's SentencePiece models of the
  source and the target side (`source.spm`, `target.spm`) and its `vocab.json` ({piece: id}), as one JSON."""
  return json.dumps({"source": base64.b64encode(source_spm).decode("ascii"),
                     "target": base64.b64encode(target_spm).decode("ascii"),
                     "vocab": json.loads(vocab_json)}, ensure_ascii=False).encode()


class MarianPieces:
  """Marian's tokenizer (transformers' `MarianTokenizer`) in its own ids: each side's SentencePiece model cuts text
  into pieces and the one vocab.json gives each piece its id (<unk>'s when it has none); a leading language code
  ">>xx<<" (multilingual targets) is a piece of its own. Text is not punctuation-normalised first (MarianTokenizer
  does that only where `sacremoses` is installed)."""

  def __init__(self, record: dict):
    import sentencepiece as spm

    self.vocab = record["vocab"]
    self.pieces = {int(i): piece for piece, i in self.vocab.items()}
    self.unk_id = self.vocab["<unk>"]
    self.sides = {side: spm.SentencePieceProcessor(model_proto=base64.b64decode(record[side]))
                  for side in ("source", "target")}

  def encode(self, texts: Sequence[str], side: str) -> list[list[int]]:
    """The ids of each text cut by `side`'s model ("source" or "target")."""
    out = []
    for text in texts:
      code = []
      if text.startswith(">>") and (end := text.find("<<")) != -1:
        code, text = [text[:end + 2]], text[end + 2:]
      pieces = code + self.sides[side].encode(text, out_type=str)
      out.append([self.vocab.get(piece, self.unk_id) for piece in pieces])
    return out

  def decode(self, ids: Sequence[int]) -> str:
    """Text of ids: their pieces joined by the target side's model ("▁" a space)."""
    pieces = [self.pieces.get(int(i), "<unk>") for i in ids]
    return self.sides["target"].decode_pieces(pieces).replace("\u2581", " ").strip()


class PretrainedTokenizer:
  """The `jformer.data.Tokenizer` interface over a pretrained tokenizer, in jformer ids: `encode` appends EOS (and
  adds no BOS: the model's shift feeds the start token), `decode` stops at the first EOS and skips padding;
  `encode_targets_batch` cuts a translation's targets (Marian's target-side model; the one tokenizer otherwise).
  Pickles as its file's bytes (cheap to send to grain workers)."""

  def __init__(self, contents: bytes):
    self.contents = contents
    record = json.loads(contents)
    self.map = VocabularyMap(record["start_id"], record["end_id"], record["size"])
    self.kind = record["kind"]
    if self.kind == "tokenizers":
      import tokenizers

      self._tokenizer = tokenizers.Tokenizer.from_str(json.dumps(record["tokenizer"]))
    elif self.kind == "sentencepiece":
      import sentencepiece as spm

      self._tokenizer = spm.SentencePieceProcessor(model_proto=base64.b64decode(record["tokenizer"]))
    elif self.kind == "marian":
      self._tokenizer = MarianPieces(record["tokenizer"])
    else:
      raise ValueError(f"pretrained vocabulary kind '{self.kind}' is not one of {list(KINDS)}")

  @classmethod
  def write(cls, path: epath.PathLike, *, kind: str, tokenizer: bytes, vocabulary: VocabularyMap) -> None:
    """Writes the vocabulary file at `path`: `tokenizer` is a `tokenizers` JSON (its bytes), a SentencePiece
    model, or Marian's (`marian_tokenizer`) (`kind`)."""
    if kind not in KINDS:
      raise ValueError(f"pretrained vocabulary kind '{kind}' is not one of {list(KINDS)}")
    inline = base64.b64encode(tokenizer).decode("ascii") if kind == "sentencepiece" else json.loads(tokenizer)
    record = {"kind": kind, "start_id": vocabulary.start_id, "end_id": vocabulary.end_id, "size": vocabulary.size,
              "tokenizer": inline}
    epath.Path(path).write_text(json.dumps(record, ensure_ascii=False))

  @classmethod
  def from_file(cls, path: epath.PathLike) -> PretrainedTokenizer:
    """Reads a file written by `write`; a file that is not one raises ValueError naming it."""
    try:
      return cls(epath.Path(path).read_bytes())
    except (json.JSONDecodeError, KeyError, TypeError) as e:
      raise ValueError(f"{os.fspath(path)} is not a pretrained vocabulary written by `jformer import-hf` "
                       f"({type(e).__name__}: {e})") from None

  def __getstate__(self) -> dict:
    return {"contents": self.contents}

  def __setstate__(self, state: dict) -> None:
    self.__init__(state["contents"])

  @property
  def vocab_size(self) -> int:
    return self.map.vocab_size

  def _encode(self, texts: Sequence[str], side: str = "source") -> list[list[int]]:
    if self.kind == "tokenizers":
      return [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]
    if self.kind == "marian":
      return self._tokenizer.encode(texts, side)
    return self._tokenizer.encode(list(texts))

  def encode(self, text: str) -> list[int]:
    """jformer ids of `text`, ending with EOS."""
    return self.encode_batch([text])[0]

  def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
    """`encode` of each text."""
    return [self.map.to_jformer(ids).tolist() + [EOS_ID] for ids in self._encode(texts)]

  def encode_targets_batch(self, texts: Sequence[str]) -> list[list[int]]:
    """`encode_batch` of a translation's target texts (Marian: by its target-side model)."""
    return [self.map.to_jformer(ids).tolist() + [EOS_ID] for ids in self._encode(texts, "target")]

  def sample(self, text: str, rng, *, alpha: float, nbest: int) -> list[int]:
    raise ValueError("subword sampling (data.subword_sampling) needs a unigram SentencePiece model trained by jformer; "
                     "a pretrained vocabulary segments one way: set data.subword_sampling=0")

  def decode(self, ids) -> str:
    """Text of jformer `ids` (1-D), up to the first EOS; padding skipped."""
    ids = [int(i) for i in ids]
    if EOS_ID in ids:
      ids = ids[:ids.index(EOS_ID)]
    pretrained = self.map.to_pretrained([i for i in ids if i != PAD_ID]).tolist()
    return self._tokenizer.decode(pretrained)

  def decode_batch(self, ids) -> list[str]:
    return [self.decode(row) for row in ids]


def is_pretrained_vocabulary(path: epath.PathLike) -> bool:
  """Whether `path` names a pretrained vocabulary file (by its `.json` suffix) rather than a SentencePiece model."""
  return os.fspath(path).endswith(".json")
