"""Corpora of chosen sizes cut from the bundled English-German corpus by software project, for measuring how a
recipe holds on data it was not tuned on: the valid and test pairs come from projects the training pairs do not.

    python benchmarks/corpus_subsets.py --pairs=18000 --out=runs/corpora/gettext_18k
    python benchmarks/corpus_subsets.py --pairs=14000 --text --out=runs/corpora/gettext_en_14k   # an LM text

Every pair of the bundled corpus carries the Debian package its catalog came from
(jformer/data/corpora/gettext_en_de/{train,valid,test}.pkg.gz). The pairs of `VALID_PACKAGES` (all three bundled
splits) give the valid split and those of `TEST_PACKAGES` the test split, `HELD_OUT_PAIRS` of each drawn with the
seed; the training split is `--pairs` pairs drawn with the seed from the bundled pairs of every other package (the
largest size, `--pairs=0`, takes them all: 107,148). The folder gets a `SOURCE.txt` naming the packages, the seed and
the bundled corpus, whose README gives the provenance and licences (GPL and compatible, per package).

`--text` writes a language-modelling text instead ({train,valid,test}.txt, the "text" dataset's format): the
English side of the same pairs, `DOCUMENT_MESSAGES` consecutive messages to a document (documents separated by a
blank line): software messages, another domain than the bundled novels.
"""

from __future__ import annotations

import argparse
import gzip
import pathlib
import sys

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
BUNDLED = REPO / "jformer" / "data" / "corpora" / "gettext_en_de"
VALID_PACKAGES = ("gnumeric-common", "dpkg")  # a spreadsheet and a package manager: 3.7k pairs.
TEST_PACKAGES = ("kstars-data", "libc-l10n")  # an astronomy program and the C library: 3.8k pairs.
HELD_OUT_PAIRS = 1500
DOCUMENT_MESSAGES = 8


def read_pairs(folder: pathlib.Path, group: str) -> list[tuple[str, str, str]]:
  """(group, source, target) of every pair of a stored corpus's {train,valid,test}.{GROUP,src,tgt}.gz, in order;
  the group names where a pair came from (a package, a manual)."""
  pairs = []
  for split in ("train", "valid", "test"):
    columns = [gzip.open(folder / f"{split}.{suffix}.gz", "rt", encoding="utf-8").read().split("\n")[:-1]
               for suffix in (group, "src", "tgt")]
    pairs += list(zip(*columns, strict=True))
  return pairs


def read_bundled() -> list[tuple[str, str, str]]:
  """(package, source, target) of every pair of the bundled corpus, its train, valid and test splits in order."""
  return read_pairs(BUNDLED, "pkg")


def partition(pairs: list[tuple[str, str, str]], valid_groups, test_groups) -> dict[str, list[tuple[str, str, str]]]:
  """{split: pairs}: the pairs of `valid_groups`, of `test_groups`, and of every other group (train), in order."""
  held_out = set(valid_groups) | set(test_groups)
  return {"train": [p for p in pairs if p[0] not in held_out],
          "valid": [p for p in pairs if p[0] in valid_groups],
          "test": [p for p in pairs if p[0] in test_groups]}


def subsets(pairs: list[tuple[str, str, str]], train_pairs: int, seed: int, valid_groups=VALID_PACKAGES,
            test_groups=TEST_PACKAGES) -> dict[str, list[tuple[str, str, str]]]:
  """{split: pairs}: valid and test from their groups (`HELD_OUT_PAIRS` each, or all of them when they have fewer),
  train (`train_pairs`, 0 = all) from the other groups; drawn with the seed, kept in corpus order."""
  rng = np.random.default_rng(seed)

  def draw(candidates, count):
    if count > len(candidates):
      raise SystemExit(f"asked for {count:,} pairs; only {len(candidates):,} are there")
    chosen = sorted(rng.choice(len(candidates), size=count, replace=False))
    return [candidates[i] for i in chosen]

  pools = partition(pairs, valid_groups, test_groups)
  return {"train": draw(pools["train"], train_pairs) if train_pairs else pools["train"],
          "valid": draw(pools["valid"], min(HELD_OUT_PAIRS, len(pools["valid"]))),
          "test": draw(pools["test"], min(HELD_OUT_PAIRS, len(pools["test"])))}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--pairs", type=int, required=True, help="training pairs (0 = every pair of the train packages)")
  parser.add_argument("--out", required=True, help="the folder to write (created)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--text", action="store_true", help="write the English side as an LM text ({split}.txt)")
  args = parser.parse_args(argv)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  splits = subsets(read_bundled(), args.pairs, args.seed)
  for split, chosen in splits.items():
    if args.text:
      documents = ["\n".join(p[1] for p in chosen[i:i + DOCUMENT_MESSAGES])
                   for i in range(0, len(chosen), DOCUMENT_MESSAGES)]
      (out / f"{split}.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
      continue
    for index, suffix in ((1, "src"), (2, "tgt")):
      (out / f"{split}.{suffix}").write_text("".join(p[index] + "\n" for p in chosen), encoding="utf-8")
  packages = sorted({p[0] for p in splits["train"]})
  write_source(out, f"Cut from jformer/data/corpora/gettext_en_de (see its README.md for provenance and licences) by "
               f"benchmarks/corpus_subsets.py --pairs={args.pairs} --seed={args.seed}{' --text' if args.text else ''}"
               f".\ntrain: {len(splits['train']):,} pairs from {', '.join(packages)}\n"
               f"valid: {len(splits['valid']):,} pairs from {', '.join(VALID_PACKAGES)}\n"
               f"test: {len(splits['test']):,} pairs from {', '.join(TEST_PACKAGES)}\n")
  return 0


def write_source(out: pathlib.Path, text: str) -> None:
  """Writes (and prints) `<out>/SOURCE.txt`: where a cut corpus comes from and what each split holds."""
  (out / "SOURCE.txt").write_text(text, encoding="utf-8")
  print(text, end="")


if __name__ == "__main__":
  sys.exit(main())
