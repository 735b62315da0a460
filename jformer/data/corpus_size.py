"""The size of a folder dataset's training split, read from its files before anything is prepared: what an adaptive
recipe (`train.recipe`, `jformer.config.adaptive`) chooses from.

    size = measure("parallel_text", "")     # the bundled corpus: CorpusSize(examples=111147, words=..., bytes=...)
"""

from __future__ import annotations

import dataclasses

from jformer.data import documents, parallel_text
from jformer.data.folders import read_lines
from jformer.data.sources import bundled_corpus_path, bundled_text_path

# Folder datasets: name -> (the files of a split, the bundled folder that path '' means, what an example is, the
# check of the splits' files that names an empty one: what `jformer.data.check_run_inputs` says).
FOLDER_DATASETS = {
    "parallel_text": (parallel_text.find_split_files, bundled_corpus_path, "pairs", parallel_text.check_aligned),
    "text": (documents.find_split_files, bundled_text_path, "documents", documents.count_documents),
}


@dataclasses.dataclass(frozen=True)
class CorpusSize:
  """A training split's size: `examples` (sentence pairs, or documents), whitespace-separated `words` and UTF-8
  `bytes` over all its files (both sides of a parallel corpus)."""
  examples: int
  words: int
  bytes: int
  unit: str = "pairs"


def measure(dataset: str, path: str) -> CorpusSize:
  """The size of the train split of folder dataset `dataset` at `path` ('' = its bundled corpus).

  Raises:
    ValueError: `dataset` is not a folder dataset (its size would need the data prepared first), naming those that
      are; or the folder's files are missing, empty or not UTF-8 (the dataset's own message).
  """
  if dataset not in FOLDER_DATASETS:
    raise ValueError(f"train.recipe measures the corpus of a folder dataset ({', '.join(FOLDER_DATASETS)}), not "
                     f"'{dataset}': set the keys the recipe would choose yourself and train.recipe=()")
  find_files, bundled, unit, check = FOLDER_DATASETS[dataset]
  split_files = find_files(path or bundled())
  files = split_files["train"]
  examples = words = size = 0
  for index, file in enumerate(files):
    in_document = False
    for line in read_lines(file):
      words += len(line.split())
      size += len(line.encode("utf-8")) + 1
      if index == 0:  # pairs: a line of the source file; documents: a run of non-blank lines.
        examples += unit == "pairs" or (bool(line.strip()) and not in_document)
        in_document = bool(line.strip())
  if not examples:  # the dataset's own line, as a run without a recipe gives it.
    check(split_files)
    raise ValueError(f"the train split ({', '.join(map(str, files))}) holds no {unit}; fill it, or point data.path "
                     "at another folder")
  return CorpusSize(examples=examples, words=words, bytes=size, unit=unit)
