"""A folder of local text files prepared once as a tfds ArrayRecord dataset (no TensorFlow needed): what the
"parallel_text" (`parallel_text.py`) and "text" (`documents.py`) datasets share.

Each split `<split>` has one file per `<split>.<suffix>` (plain or gzipped `.gz`, UTF-8). The builder config is
named after the folder and a fingerprint of its path and files (names, sizes, mtimes), so a prepared dataset is
reused for the same folder and a changed or different folder gets its own data directory:
`<data_dir>/<builder name>/<folder name>-<fingerprint>/1.0.0/`.
"""

from __future__ import annotations

import gzip
import hashlib
import inspect
import os
import re
from typing import Iterator, Sequence, TypeVar

import tensorflow_datasets as tfds
from etils import epath

from jformer import paths, text

SPLITS = ("train", "valid", "test")


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


def find_split_files(folder: epath.PathLike, suffixes: Sequence[str], *, kind: str,
                     need: str) -> dict[str, tuple[str, ...]]:
  """Maps each split to its files, one per suffix: `<split>.<suffix>` or `<split>.<suffix>.gz`.

  Args:
    folder: the dataset's folder (`data.path`).
    suffixes: the file suffixes of a split, e.g. ("src", "tgt").
    kind: what the folder holds, for the errors ("parallel text").
    need: what each split needs, for the error on missing files ("needs a .src and a .tgt file").

  Raises:
    ValueError: the folder is missing, a file is missing, or both a plain and a gzipped copy exist.
  """
  folder = epath.Path(folder)
  if not folder.is_dir():
    raise ValueError(f"{kind} folder {os.fspath(folder)!r} does not exist; set --config.data.path to a folder with "
                     f"{{{','.join(SPLITS)}}}.{{{','.join(suffixes)}}} files (optionally .gz).")
  files, missing = {}, []
  for split in SPLITS:
    found_split = []
    for suffix in suffixes:
      plain = os.fspath(folder / f"{split}.{suffix}")
      found = [p for p in (plain, plain + ".gz") if epath.Path(p).is_file()]
      if len(found) == 2:
        raise ValueError(f"both {found[0]} and {found[1]} exist; keep only one of them.")
      if not found:
        missing.append(f"{split}.{suffix}[.gz]")
      found_split.extend(found)
    files[split] = tuple(found_split)
  if missing:
    present = sorted(p.name for p in folder.iterdir())
    raise ValueError(f"{kind} folder {folder} (data.path) lacks {missing} (it holds {present}); every split in "
                     f"{SPLITS} {need}.")
  return files


def fingerprint(folder: epath.PathLike, files: dict[str, tuple[str, ...]]) -> str:
  """A short hash of the folder's absolute path and its files' names, sizes and mtimes."""
  h = hashlib.sha256(os.fspath(paths.absolute(folder)).encode())
  for path in sorted(p for split_files in files.values() for p in split_files):
    h.update(f"\0{epath.Path(path).name}\0{_size_and_mtime(path)}".encode())
  return h.hexdigest()[:16]


def _size_and_mtime(path: str) -> str:
  """`size\\0mtime` of a file: the mtime in nanoseconds where local, in the store's resolution (seconds) elsewhere."""
  if paths.is_local(path):
    st = os.stat(path)
    return f"{st.st_size}\0{st.st_mtime_ns}"
  st = epath.Path(path).stat()
  return f"{st.length}\0{st.mtime}"


class FolderConfig(tfds.core.BuilderConfig):
  """Builder config of one folder of text files."""

  def __init__(self, *, folder: str, **kwargs):
    super().__init__(**kwargs)
    self.folder = folder


class FolderBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """Base of the builders of a folder (`builder_config.folder`); subclasses find and check its files in
  `find_files(folder)` and define `_info`, `_split_generators` and `_generate_examples` as tfds asks."""

  VERSION = tfds.core.Version("1.0.0")

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    # tfds 4.9.10 derives this from the package and then needs the `importlib_resources` backport (not installed).
    return epath.Path(inspect.getfile(cls))

  @classmethod
  def find_files(cls, folder: epath.PathLike) -> dict[str, tuple[str, ...]]:
    raise NotImplementedError


Builder = TypeVar("Builder", bound=FolderBuilder)


def prepare(builder_class: type[Builder], folder: epath.PathLike, data_dir: epath.PathLike | None) -> Builder:
  """The `builder_class` builder of `folder`, prepared (ArrayRecord) under `data_dir` unless that was already done.

  Args:
    builder_class: a `FolderBuilder` subclass.
    folder: the folder of text files (local or any `etils.epath` path, e.g. gs://).
    data_dir: tfds data directory (local or gs://...); None = tfds's default (`~/tensorflow_datasets`).
  """
  folder = paths.absolute(folder)
  files = builder_class.find_files(folder)
  name = re.sub(r"[^A-Za-z0-9_]", "_", folder.name)[:48] or "root"
  config = FolderConfig(name=f"{name}-{fingerprint(folder, files)}", folder=os.fspath(folder))
  builder = builder_class(config=config, data_dir=data_dir, file_format="array_record")
  builder.download_and_prepare()
  return builder
