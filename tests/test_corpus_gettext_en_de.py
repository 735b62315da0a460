"""The bundled English-German corpus's per-pair package labels (`*.pkg.gz`): one per pair, from the packages its
README lists, in the counts its stats.json gives, so that a split by software project is a split of its pairs."""
from __future__ import annotations

import collections
import gzip
import json
import pathlib
import re

FOLDER = pathlib.Path(__file__).resolve().parents[1] / "jformer" / "data" / "corpora" / "gettext_en_de"
SPLITS = ("train", "valid", "test")


def lines(name: str) -> list[str]:
  return gzip.decompress((FOLDER / name).read_bytes()).decode("utf-8").split("\n")[:-1]


def test_every_pair_has_a_package_listed_in_the_readme():
  readme_packages = set(re.findall(r"^\| ([a-z0-9.+-]+)[^|]*\| [^|]+\| [\d,]+ \|", (FOLDER / "README.md").read_text(),
                                   re.M))
  assert len(readme_packages) == 28
  for split in SPLITS:
    labels = lines(f"{split}.pkg.gz")
    assert len(labels) == len(lines(f"{split}.src.gz")) == len(lines(f"{split}.tgt.gz")), split
    assert set(labels) <= readme_packages, split


def test_label_counts_add_up_to_the_unique_sources_per_package():
  """stats.json counts every unique English source by its first package; the splits hold those sources less the
  pairs dropped for sharing a target across splits (at most a few hundred), never more."""
  stats = json.loads((FOLDER / "stats.json").read_text())
  counts = collections.Counter(label for split in SPLITS for label in lines(f"{split}.pkg.gz"))
  expected = stats["unique_sources_per_package"]
  assert set(counts) == set(expected)
  for package, count in counts.items():
    assert 0 <= expected[package] - count <= 0.01 * expected[package] + 20, package
  assert sum(expected.values()) - sum(counts.values()) == stats["unique_sources"] - sum(
      stats[split]["pairs"] for split in SPLITS)


def test_labels_name_the_catalog_a_pair_came_from():
  """Spot checks: gcc's diagnostics carry its quoting placeholders, the game dialogues none of them."""
  pairs = zip(lines("train.src.gz"), lines("train.pkg.gz"))
  by_package = collections.defaultdict(list)
  for source, package in pairs:
    by_package[package].append(source)
  share = lambda package, pattern: sum(bool(re.search(pattern, s)) for s in by_package[package]) / len(
      by_package[package])
  assert share("gcc-12-locales", r"%[qe<]") > 0.3
  assert share("freedroidrpg-data", r"%[qe<]") < 0.01
  assert share("postgresql-15", r"(?i)\b(table|column|index|relation|database)\b") > 0.1
