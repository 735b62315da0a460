"""A tfds builder that turns a folder of aligned text files into an ArrayRecord dataset (no TensorFlow needed).

The folder holds `{train,valid,test}.{src,tgt}` (each may be gzipped: `train.src.gz`), UTF-8, one segment per line;
line i of `<split>.src` is translated by line i of `<split>.tgt`. Each example is `{"src": str, "tgt": str}`;
record i is line i (no shuffling at write time).

The builder config is named after the folder and a fingerprint of its path and files (names, sizes, mtimes), so a
prepared dataset is reused for the same folder and a changed or different folder gets its own data directory:
`<data_dir>/parallel_text/<folder name>-<fingerprint>/1.0.0/`.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from typing import Iterator

import tensorflow_datasets as tfds
from etils import epath

from jformer import paths, text

SPLITS = ("train", "valid", "test")
SIDES = ("src", "tgt")


def read_lines(path: str) -> Iterator[str]:
  """Yields the lines of `path` (UTF-8, plain or gzipped `.gz`, local or any `etils.epath` path) without their line
  ending; lines split at "\\n" only. A line that is not UTF-8 raises a ValueError naming the file and the line."""
  with epath.Path(path).open("rb") as raw, (gzip.open(raw, "rb") if path.endswith(".gz") else raw) as f:
    yield from text.utf8_lines(f, path, fix="convert the file to UTF-8 (e.g. `iconv -f latin1 -t utf-8`).")


def count_lines(path: str) -> int:
  """Number of lines of `path`; a file that is not UTF-8 text raises a ValueError naming it and its first bad line."""
  try:
    return sum(1 for _ in read_lines(path))
  except OSError as e:
    raise ValueError(f"cannot read {path} ({e}); give plain or gzipped UTF-8 files.") from e


def find_split_files(folder: epath.PathLike) -> dict[str, tuple[str, str]]:
  """Maps each split to its `(src, tgt)` file paths, taking `<split>.<side>` or `<split>.<side>.gz`.

  Raises:
    ValueError: the folder is missing, a file is missing, or both a plain and a gzipped copy exist.
  """
  folder = epath.Path(folder)
  if not folder.is_dir():
    raise ValueError(f"parallel text folder {os.fspath(folder)!r} does not exist; set --config.data.path to a "
                     f"folder with {{{','.join(SPLITS)}}}.{{{','.join(SIDES)}}} files (optionally .gz).")
  files, missing = {}, []
  for split in SPLITS:
    pair = []
    for side in SIDES:
      plain = os.fspath(folder / f"{split}.{side}")
      found = [p for p in (plain, plain + ".gz") if epath.Path(p).is_file()]
      if len(found) == 2:
        raise ValueError(f"both {found[0]} and {found[1]} exist; keep only one of them.")
      if not found:
        missing.append(f"{split}.{side}[.gz]")
      pair.extend(found)
    files[split] = tuple(pair)
  if missing:
    present = sorted(p.name for p in folder.iterdir())
    raise ValueError(f"parallel text folder {folder} (data.path) lacks {missing} (it holds {present}); every split "
                     f"in {SPLITS} needs a .src and a .tgt file.")
  return files


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


def fingerprint(folder: epath.PathLike, files: dict[str, tuple[str, str]]) -> str:
  """A short hash of the folder's absolute path and its files' names, sizes and mtimes."""
  h = hashlib.sha256(os.fspath(paths.absolute(folder)).encode())
  for path in sorted(p for pair in files.values() for p in pair):
    h.update(f"\0{epath.Path(path).name}\0{_size_and_mtime(path)}".encode())
  return h.hexdigest()[:16]


def _size_and_mtime(path: str) -> str:
  """`size\\0mtime` of a file: the mtime in nanoseconds where local, in the store's resolution (seconds) elsewhere."""
  if paths.is_local(path):
    st = os.stat(path)
    return f"{st.st_size}\0{st.st_mtime_ns}"
  st = epath.Path(path).stat()
  return f"{st.length}\0{st.mtime}"


class ParallelTextConfig(tfds.core.BuilderConfig):
  """Builder config of one folder of aligned files."""

  def __init__(self, *, folder: str, **kwargs):
    super().__init__(**kwargs)
    self.folder = folder


class ParallelText(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Aligned `{train,valid,test}.{src,tgt}[.gz]` files of one folder (see the module docstring)."""

  VERSION = tfds.core.Version("1.0.0")

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    # tfds 4.9.10 derives this from the package and then needs the `importlib_resources` backport (not installed).
    return epath.Path(__file__)

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
  """The builder of `folder`, prepared (ArrayRecord) under `data_dir` unless that was already done.

  Args:
    folder: the folder of aligned files (local or any `etils.epath` path, e.g. gs://).
    data_dir: tfds data directory (local or gs://...); None = tfds's default (`~/tensorflow_datasets`).
  """
  folder = paths.absolute(folder)
  files = find_split_files(folder)
  name = re.sub(r"[^A-Za-z0-9_]", "_", folder.name)[:48] or "root"
  config = ParallelTextConfig(name=f"{name}-{fingerprint(folder, files)}", folder=os.fspath(folder))
  builder = ParallelText(config=config, data_dir=data_dir, file_format="array_record")
  builder.download_and_prepare()
  return builder
