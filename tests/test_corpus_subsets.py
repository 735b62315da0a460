"""benchmarks/corpus_subsets.py: corpora cut from the bundled one by project, valid and test from projects that
the training pairs do not come from."""

import pathlib

import pytest

from helpers import import_benchmark

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def subsets_module():
  return import_benchmark("corpus_subsets")


@pytest.fixture(scope="module")
def bundled(subsets_module):
  return subsets_module.read_bundled()


def test_valid_and_test_come_from_projects_train_does_not(subsets_module, bundled):
  splits = subsets_module.subsets(bundled, 5000, seed=0)
  packages = {split: {p[0] for p in pairs} for split, pairs in splits.items()}
  assert [len(splits[s]) for s in ("train", "valid", "test")] == [5000, 1500, 1500]
  assert packages["valid"] == set(subsets_module.VALID_PACKAGES)
  assert packages["test"] == set(subsets_module.TEST_PACKAGES)
  assert not packages["train"] & (packages["valid"] | packages["test"]) and len(packages["train"]) > 15


def test_a_size_is_drawn_with_its_seed_and_the_largest_takes_every_train_pair(subsets_module, bundled):
  assert subsets_module.subsets(bundled, 300, seed=1) == subsets_module.subsets(bundled, 300, seed=1)
  assert subsets_module.subsets(bundled, 300, seed=1)["train"] != subsets_module.subsets(bundled, 300, seed=2)["train"]
  held_out = set(subsets_module.VALID_PACKAGES) | set(subsets_module.TEST_PACKAGES)
  everything = subsets_module.subsets(bundled, 0, seed=0)["train"]
  assert len(everything) == sum(p[0] not in held_out for p in bundled) == 107_148


def test_an_lm_text_holds_the_english_side_in_documents_of_eight_messages(subsets_module, bundled, tmp_path):
  subsets_module.main(["--pairs=100", "--text", f"--out={tmp_path}"])
  documents = (tmp_path / "train.txt").read_text(encoding="utf-8").rstrip("\n").split("\n\n")
  train = subsets_module.subsets(bundled, 100, seed=0)["train"]
  assert len(documents) == 13 and documents[0].split("\n") == [p[1] for p in train[:8]]
  assert {"valid.txt", "test.txt", "SOURCE.txt"} <= {f.name for f in tmp_path.iterdir()}
