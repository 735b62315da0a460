"""Random-access views of a tfds data source (a sequence of feature dicts) as elements of text: the base of
`sources.TextPairSource` (translation pairs) and `documents.DocumentSource` (language-modelling documents)."""

from __future__ import annotations

import copy
from typing import Any, Iterator, Sequence

READ_CHUNK = 4096  # Records per batched read; ArrayRecord reads one by one are ~100x slower.


class RecordView:
  """Records `indices` of `source`, each turned into a dict of str by the subclass's `_element`.

  Args:
    source: a sequence of feature dicts (`tfds.data_source` / `builder.as_data_source`), text as bytes or str.
    indices: the records of `source` this view holds, in order; None = all (`shard` makes one host's view).
  """

  def __init__(self, source: Sequence[dict[str, Any]], *, indices: range | None = None):
    self._source = source
    self._indices = range(len(source)) if indices is None else indices

  def __len__(self) -> int:
    return len(self._indices)

  def __getitem__(self, index: int) -> dict[str, str]:
    return self._element(self._source[self._indices[index]])

  def __getitems__(self, indices: Sequence[int]) -> list[dict[str, str]]:
    """Batched read (much faster than one `__getitem__` per element)."""
    return [self._element(example) for example in self._source.__getitems__([self._indices[i] for i in indices])]

  def shard(self, shard_index: int, shard_count: int):
    """Elements shard_index, shard_index + shard_count, ... of this view (same type): one host's share when
    `shard_count` hosts read it. Nothing is read until the view is."""
    if not 0 <= shard_index < shard_count:
      raise ValueError(f"shard_index={shard_index} is not in [0, shard_count={shard_count}).")
    view = copy.copy(self)
    view._indices = self._indices[shard_index::shard_count]
    return view

  def __iter__(self) -> Iterator[dict[str, str]]:
    """All elements in order, read in chunks."""
    for start in range(0, len(self), READ_CHUNK):
      yield from self.__getitems__(range(start, min(start + READ_CHUNK, len(self))))

  def _view_repr(self) -> str:
    """", indices=range(...)" for a shard, "" for the whole source (for the subclasses' `__repr__`)."""
    return "" if self._indices == range(len(self._source)) else f", indices={self._indices!r}"

  def _element(self, example: dict[str, Any]) -> dict[str, str]:
    raise NotImplementedError


def as_str(text: bytes | str) -> str:
  """A text feature as str (tfds gives bytes)."""
  return text.decode("utf-8") if isinstance(text, bytes) else str(text)
