"""Compression baselines of a language model's bits per byte, on the bytes bits per byte counts.

A split's bytes are its documents, each followed by "\n" (UTF-8): the +1 of `LMDatasets.split_bytes`, the byte
that a document's EOS token predicts.
"""

from __future__ import annotations

import lzma
from typing import Iterable


def split_text_bytes(documents: Iterable[str]) -> bytes:
  """The UTF-8 bytes of `documents`, each followed by "\\n"."""
  return "".join(document + "\n" for document in documents).encode("utf-8")


def xz_bits_per_byte(train_documents: Iterable[str], valid_documents: Iterable[str]) -> float:
  """Bits per byte that `xz -9` needs for the valid split given the train split:
  `8 * (size(xz(T + V)) - size(xz(T))) / len(V)`, with T, V = `split_text_bytes` of each split (lzma preset 9,
  whose 64 MiB dictionary lets V refer back to all of a train split that size)."""
  train, valid = split_text_bytes(train_documents), split_text_bytes(valid_documents)
  if not valid:
    raise ValueError("the valid split has no documents: the xz baseline needs some text to compress")
  compressed = [len(lzma.compress(text, preset=9)) for text in (train + valid, train)]
  return 8 * (compressed[0] - compressed[1]) / len(valid)
