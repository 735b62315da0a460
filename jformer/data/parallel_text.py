"""A tfds builder that turns a folder of aligned text files into an ArrayRecord dataset (no TensorFlow needed).

The folder holds `{train,valid,test}.{src,tgt}` (each may be gzipped: `train.src.gz`), UTF-8, one segment per line;
line i of `<split>.src` is translated by line i of `<split>.tgt`. Each example is `{"src": str, "tgt": str}`;
record i is line i (no shuffling at write time). Preparation and reuse: `folders.prepare`, under
`<data_dir>/parallel_text/<folder name>-<fingerprint>/1.0.0/`.
"""

from __future__ import annotations

import tensorflow_datasets as tfds
from etils import epath

from jformer.data import folders
from jformer.data.folders import count_lines, read_lines

SPLITS = folders.SPLITS
SIDES = ("src", "tgt")


def find_split_files(folder: epath.PathLike) -> dict[str, tuple[str, str]]:
  """Maps each split to its `(src, tgt)` file paths, taking `<split>.<side>` or `<split>.<side>.gz`.

  Raises:
    ValueError: the folder is missing, a file is missing, or both a plain and a gzipped copy exist.
  """
  return folders.find_split_files(folder, SIDES, kind="parallel text", need="needs a .src and a .tgt file")


def check_aligned(files: dict[str, tuple[str, str]]) -> dict[str, int]:
  """Number of pairs per split; raises a ValueError naming the file(s) if one is empty or two are misaligned."""
  sizes = {}
  for split, (src, tgt) in files.items():
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    empty = [p for p, n in ((src, n_src), (tgt, n_tgt)) if n == 0]
    if empty:
      raise ValueError(f"empty file(s) {empty} in split '{split}'; each split needs at least one line pair (fill "
                       "them, or point data.path at another folder).")
    if n_src != n_tgt:
      raise ValueError(f"misaligned split '{split}': {src} has {n_src} lines but {tgt} has {n_tgt}; line i of "
                       "one must translate line i of the other (fix or regenerate the files).")
    sizes[split] = n_src
  return sizes


class ParallelText(folders.FolderBuilder, skip_registration=True):
  """Aligned `{train,valid,test}.{src,tgt}[.gz]` files of one folder (see the module docstring)."""

  @classmethod
  def find_files(cls, folder: epath.PathLike) -> dict[str, tuple[str, str]]:
    return find_split_files(folder)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=f"Aligned text pairs from {self.builder_config.folder}.",
        features=tfds.features.FeaturesDict({"src": tfds.features.Text(), "tgt": tfds.features.Text()}),
        disable_shuffling=True)

  def _split_generators(self, dl_manager):
    del dl_manager  # Local files only.
    files = find_split_files(self.builder_config.folder)
    check_aligned(files)
    return {split: self._generate_examples(src, tgt) for split, (src, tgt) in files.items()}

  def _generate_examples(self, src: str, tgt: str):
    for i, (source, target) in enumerate(zip(read_lines(src), read_lines(tgt))):
      yield i, {"src": source, "tgt": target}


def prepare(folder: epath.PathLike, data_dir: epath.PathLike | None) -> ParallelText:
  """The builder of `folder`, prepared (ArrayRecord) under `data_dir` unless that was already done (`folders.prepare`).

  Args:
    folder: the folder of aligned files (local or any `etils.epath` path, e.g. gs://).
    data_dir: tfds data directory (local or gs://...); None = tfds's default (`~/tensorflow_datasets`).
  """
  return folders.prepare(ParallelText, folder, data_dir)
