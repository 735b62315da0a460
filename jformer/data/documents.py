"""Language-modelling documents: `DocumentSource` (random access to `{"text": str}` documents) and the tfds builder
of the "text" dataset, a folder of documents prepared once as ArrayRecord (no TensorFlow needed).

The folder holds `{train,valid,test}.txt` (each may be gzipped: `train.txt.gz`), UTF-8. Documents are separated by
one or more blank lines (a line that is empty or only whitespace); a document is its lines joined with "\\n" (line
endings "\\n" or "\\r\\n" dropped, no trailing newline), so blank lines before, between and after documents belong
to none. Each example is `{"text": str}`; record i is the i-th document of the file. Preparation and reuse:
`folders.prepare`, under `<data_dir>/text_documents/<folder name>-<fingerprint>/1.0.0/`.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import tensorflow_datasets as tfds
from etils import epath

from jformer.data import folders, records

SUFFIX = "txt"


class DocumentSource(records.RecordView):
  """Random-access view of a tfds data source as `{"text": str}` documents (same API as `sources.TextPairSource`:
  `len`, `[i]`, batched `__getitems__`, `shard(i, n)`, chunked iteration).

  Args:
    source: a sequence of feature dicts (`tfds.data_source` / `builder.as_data_source`), text as bytes or str.
    text_key: the feature that holds a document's text.
    indices: the records of `source` this view holds, in order; None = all (`shard` makes one host's view).
  """

  def __init__(self, source: Sequence[dict[str, Any]], *, text_key: str = "text", indices: range | None = None):
    super().__init__(source, indices=indices)
    self._text_key = text_key

  def __repr__(self) -> str:
    return f"DocumentSource({self._source!r}, text={self._text_key!r}{self._view_repr()})"

  def _element(self, example: dict[str, Any]) -> dict[str, str]:
    return {"text": records.as_str(example[self._text_key])}


def read_documents(path: str) -> Iterator[str]:
  """The documents of the text file `path` (see the module docstring); non-UTF-8 text raises a ValueError naming
  the file and the line."""
  lines: list[str] = []
  for line in folders.read_lines(path):
    if line.strip():
      lines.append(line)
    elif lines:
      yield "\n".join(lines)
      lines = []
  if lines:
    yield "\n".join(lines)


def find_split_files(folder: epath.PathLike) -> dict[str, tuple[str]]:
  """Maps each split to its `(<split>.txt,)` or `(<split>.txt.gz,)` file path.

  Raises:
    ValueError: the folder is missing, a file is missing, or both a plain and a gzipped copy exist.
  """
  return folders.find_split_files(folder, (SUFFIX,), kind="text", need="needs a .txt file of documents separated "
                                  "by blank lines")


def count_documents(files: dict[str, tuple[str]]) -> dict[str, int]:
  """Number of documents per split; raises a ValueError naming the file of a split without any (empty or only
  blank lines) or its first line that is not UTF-8."""
  sizes = {}
  for split, (path,) in files.items():
    try:
      sizes[split] = sum(1 for _ in read_documents(path))
    except OSError as e:
      raise ValueError(f"cannot read {path} ({e}); give plain or gzipped UTF-8 files.") from e
    if not sizes[split]:
      raise ValueError(f"{path} holds no document (it is empty or only blank lines); each split needs at least one "
                       "document (fill it, or point data.path at another folder).")
  return sizes


class TextDocuments(folders.FolderBuilder, skip_registration=True):
  """Documents of `{train,valid,test}.txt[.gz]` in one folder (see the module docstring)."""

  @classmethod
  def find_files(cls, folder: epath.PathLike) -> dict[str, tuple[str]]:
    return find_split_files(folder)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=f"Documents (separated by blank lines) from {self.builder_config.folder}.",
        features=tfds.features.FeaturesDict({"text": tfds.features.Text()}),
        disable_shuffling=True)

  def _split_generators(self, dl_manager):
    del dl_manager  # Local files only.
    files = find_split_files(self.builder_config.folder)
    count_documents(files)
    return {split: self._generate_examples(path) for split, (path,) in files.items()}

  def _generate_examples(self, path: str):
    for i, document in enumerate(read_documents(path)):
      yield i, {"text": document}


def prepare(folder: epath.PathLike, data_dir: epath.PathLike | None) -> TextDocuments:
  """The builder of `folder`, prepared (ArrayRecord) under `data_dir` unless that was already done (`folders.prepare`).

  Args:
    folder: the folder of `{train,valid,test}.txt[.gz]` (local or any `etils.epath` path, e.g. gs://).
    data_dir: tfds data directory (local or gs://...); None = tfds's default (`~/tensorflow_datasets`).
  """
  return folders.prepare(TextDocuments, folder, data_dir)
