"""A small language-modelling text cut from the bundled novels (jformer/data/corpora/english_text): a language model's
small-corpus regime, where its budget passes over the text many times.

    python benchmarks/text_subset.py --bytes=200000 --out=runs/corpora/novels_200k

The train split is whole chapters (documents) drawn with the seed from the bundled train split, kept in corpus order,
as many as fit in `--bytes` (UTF-8, with the blank lines between them); the valid and test splits are the bundled
ones, so bits per byte compare with the LM demo on the whole text. The folder gets a `SOURCE.txt` naming the size,
the seed and the bundled corpus, whose README gives the provenance and licence (public domain).
"""

from __future__ import annotations

import argparse
import gzip
import pathlib
import shutil
import sys

import numpy as np

import corpus_subsets  # benchmarks/, beside this script

REPO = pathlib.Path(__file__).resolve().parents[1]
BUNDLED = REPO / "jformer" / "data" / "corpora" / "english_text"


def read_documents(split: str) -> list[str]:
  """The documents of a bundled split (separated by one blank line)."""
  return gzip.open(BUNDLED / f"{split}.txt.gz", "rt", encoding="utf-8").read().rstrip("\n").split("\n\n")


def cut(documents: list[str], max_bytes: int, seed: int) -> list[str]:
  """Documents drawn in a random order (the seed's) while they fit in `max_bytes` with their separators, returned in
  corpus order."""
  order = np.random.default_rng(seed).permutation(len(documents))
  chosen, size = [], 0
  for i in order:
    added = len(documents[i].encode("utf-8")) + (2 if chosen else 1)  # "\n\n" between documents, "\n" at the end.
    if size + added <= max_bytes:
      chosen.append(i)
      size += added
  return [documents[i] for i in sorted(chosen)]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--bytes", type=int, required=True, help="most bytes of the train split")
  parser.add_argument("--out", required=True, help="the folder to write (created)")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  train = cut(read_documents("train"), args.bytes, args.seed)
  (out / "train.txt").write_text("\n\n".join(train) + "\n", encoding="utf-8")
  for split in ("valid", "test"):
    with gzip.open(BUNDLED / f"{split}.txt.gz", "rb") as source, (out / f"{split}.txt").open("wb") as target:
      shutil.copyfileobj(source, target)
  size = (out / "train.txt").stat().st_size
  corpus_subsets.write_source(
      out, f"Cut from jformer/data/corpora/english_text (see its README.md for provenance and licence) by "
      f"benchmarks/text_subset.py --bytes={args.bytes} --seed={args.seed}.\n"
      f"train: {len(train)} documents, {size:,} bytes; valid and test: the bundled splits\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
