"""The bundled English LM corpus: its format, its size, a split by document, and a README that states its figures."""
from __future__ import annotations

import gzip
import json
import pathlib

import pytest

FOLDER = pathlib.Path(__file__).resolve().parents[1] / "jformer" / "data" / "corpora" / "english_text"
SPLITS = ("train", "valid", "test")


@pytest.fixture(scope="module")
def texts() -> dict:
  return {split: (FOLDER / f"{split}.txt.gz").read_bytes() for split in SPLITS}


def documents(data: bytes) -> list:
  return gzip.decompress(data).decode("utf-8")[:-1].split("\n\n")


def test_files_are_documents_separated_by_one_blank_line(texts):
  for split, data in texts.items():
    text = gzip.decompress(data).decode("utf-8")
    assert text.endswith("\n") and not text.endswith("\n\n"), split
    assert "\n\n\n" not in text and not text.startswith("\n") and "\r" not in text, split
    assert all(doc.strip() == doc and doc.split("\n")[1:] for doc in documents(data)), split   # heading + paragraphs


def test_at_least_five_megabytes_split_by_document(texts):
  sizes = {split: len(gzip.decompress(data)) for split, data in texts.items()}
  assert sum(sizes.values()) >= 5_000_000
  assert sum(len(data) for data in texts.values()) <= 5_000_000   # the repository ships it compressed
  for split in ("valid", "test"):
    assert 0.02 <= sizes[split] / sum(sizes.values()) <= 0.03, split
  per_split = {split: set(documents(data)) for split, data in texts.items()}
  assert not per_split["train"] & per_split["valid"] and not per_split["train"] & per_split["test"]
  assert not per_split["valid"] & per_split["test"]


def test_gzip_files_carry_no_name_or_time(texts):
  for split, data in texts.items():
    assert data[3] & 0x08 == 0 and data[4:8] == b"\0\0\0\0", split   # FNAME flag unset, MTIME zero


def test_stats_and_readme_state_the_files_figures(texts):
  stats = json.loads((FOLDER / "stats.json").read_text())
  readme = (FOLDER / "README.md").read_text()
  for split, data in texts.items():
    text = gzip.decompress(data)
    figures = stats["splits"][split]
    assert (figures["documents"], figures["bytes"], figures["words"]) == (len(documents(data)), len(text),
                                                                           len(text.split()))
    assert f"| {split} | {figures['documents']} | {figures['bytes']:,} | {figures['words']:,} |" in readme
    if split != "train":
      assert [doc.split("\n")[0] for doc in documents(data)] == [t.rsplit(" / ", 1)[1] for t in figures["titles"]]
  assert b"Gutenberg" not in b"".join(gzip.decompress(data) for data in texts.values())
