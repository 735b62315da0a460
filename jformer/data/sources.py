"""The dataset registry: `config.data.dataset` -> random-access sources of `{"inputs": str, "targets": str}` pairs.

Every dataset has the splits "train", "valid" and "test". A loader is registered under a name or a glob pattern:

    @register_dataset("my_corpus")
    def load_my_corpus(name, split, *, path, data_dir, source_lang, target_lang) -> TextPairSource: ...

Registered here:
  "parallel_text"          a folder of aligned `{train,valid,test}.{src,tgt}[.gz]` files (`path`; "" = the bundled
                           gettext en->de corpus), prepared as a tfds ArrayRecord dataset under `data_dir`.
                           `.src` is the source side; `source_lang`/`target_lang` are not used.
  "wmt*_translate/*"       tfds translation datasets, e.g. "wmt14_translate/de-en", read with `tfds.data_source`
                           from `data_dir`; `source_lang`/`target_lang` pick the direction (default en -> de).
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Iterator, Sequence

import tensorflow_datasets as tfds

from jformer.data import parallel_text
from jformer.registry import Registry

SPLITS = ("train", "valid", "test")
_TFDS_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
_READ_CHUNK = 4096  # Records per batched read; ArrayRecord reads one by one are ~100x slower.

Loader = Callable[..., "TextPairSource"]
_REGISTRY: Registry[Loader] = Registry("dataset", patterns=True)


class TextPairSource:
  """Random-access view of a tfds data source as `{"inputs": str, "targets": str}` elements.

  Args:
    source: a sequence of feature dicts (`tfds.data_source` / `builder.as_data_source`), text as bytes or str.
    inputs_key: the feature that becomes "inputs" (source language).
    targets_key: the feature that becomes "targets" (target language).
    indices: the records of `source` this view holds, in order; None = all (`shard` makes one host's view).
  """

  def __init__(self, source: Sequence[dict[str, Any]], *, inputs_key: str, targets_key: str,
               indices: range | None = None):
    self._source = source
    self._keys = (inputs_key, targets_key)
    self._indices = range(len(source)) if indices is None else indices

  def __len__(self) -> int:
    return len(self._indices)

  def __getitem__(self, index: int) -> dict[str, str]:
    return self._pair(self._source[self._indices[index]])

  def __getitems__(self, indices: Sequence[int]) -> list[dict[str, str]]:
    """Batched read (much faster than one `__getitem__` per element)."""
    return [self._pair(example) for example in self._source.__getitems__([self._indices[i] for i in indices])]

  def shard(self, shard_index: int, shard_count: int) -> TextPairSource:
    """Elements shard_index, shard_index + shard_count, ... of this source: one host's share when `shard_count`
    hosts read it. Nothing is read until the view is."""
    if not 0 <= shard_index < shard_count:
      raise ValueError(f"shard_index={shard_index} is not in [0, shard_count={shard_count}).")
    return TextPairSource(self._source, inputs_key=self._keys[0], targets_key=self._keys[1],
                          indices=self._indices[shard_index::shard_count])

  def __iter__(self) -> Iterator[dict[str, str]]:
    """All elements in order, read in chunks."""
    for start in range(0, len(self), _READ_CHUNK):
      yield from self.__getitems__(range(start, min(start + _READ_CHUNK, len(self))))

  def __repr__(self) -> str:
    view = "" if self._indices == range(len(self._source)) else f", indices={self._indices!r}"
    return f"TextPairSource({self._source!r}, inputs={self._keys[0]!r}, targets={self._keys[1]!r}{view})"

  def _pair(self, example: dict[str, Any]) -> dict[str, str]:
    inputs, targets = (_as_str(example[k]) for k in self._keys)
    return {"inputs": inputs, "targets": targets}


def _as_str(text: bytes | str) -> str:
  return text.decode("utf-8") if isinstance(text, bytes) else str(text)


def register_dataset(name: str) -> Callable[[Loader], Loader]:
  """Decorator registering `loader(name, split, *, path, data_dir, source_lang, target_lang) -> TextPairSource`.

  `name` may be a glob pattern ("wmt*_translate/*"); the loader then gets the full name it was asked for.
  """
  return lambda loader: _REGISTRY.add(name, loader)


def get_dataset(name: str) -> Loader:
  """The loader registered for `name` (exact names first, then patterns); unknown names raise a KeyError that lists
  the known ones."""
  return _REGISTRY.get(name)


def available_datasets() -> list[str]:
  """Sorted registered names and patterns."""
  return _REGISTRY.available()


def load_split(dataset: str, split: str, *, path: str = "", data_dir: str | None = None, source_lang: str = "en",
               target_lang: str = "de") -> TextPairSource:
  """The `split` ("train", "valid" or "test") of `dataset`, as `{"inputs": str, "targets": str}` elements.

  Args:
    dataset: a registered name (`available_datasets()`).
    split: "train", "valid" or "test".
    path: dataset-specific location (the folder for "parallel_text"; "" = the bundled corpus).
    data_dir: tfds data directory (where prepared datasets live); None = tfds's default.
    source_lang, target_lang: translation direction, for datasets with several languages.
  """
  if split not in SPLITS:
    raise ValueError(f"unknown split '{split}'; splits are {SPLITS}")
  return get_dataset(dataset)(dataset, split, path=path, data_dir=data_dir, source_lang=source_lang,
                              target_lang=target_lang)


def pair_texts(source: TextPairSource) -> Iterator[str]:
  """Both sides of every pair (inputs, then targets), e.g. to train a shared vocabulary."""
  for pair in source:
    yield pair["inputs"]
    yield pair["targets"]


def bundled_corpus_path() -> str:
  """The folder of the bundled gettext English->German corpus (`jformer/data/corpora/gettext_en_de`)."""
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpora", "gettext_en_de")


@register_dataset("parallel_text")
def load_parallel_text(name: str, split: str, *, path: str, data_dir: str | None, source_lang: str,
                       target_lang: str) -> TextPairSource:
  """A folder of aligned files (`path`, "" = bundled corpus); `.src` -> inputs, whatever the languages."""
  del name, source_lang, target_lang  # The files fix the direction.
  builder = parallel_text.prepare(path or bundled_corpus_path(), data_dir)
  return TextPairSource(builder.as_data_source(split), inputs_key="src", targets_key="tgt")


@register_dataset("wmt*_translate/*")
def load_tfds_translate(name: str, split: str, *, path: str, data_dir: str | None, source_lang: str,
                        target_lang: str) -> TextPairSource:
  """A tfds WMT dataset such as "wmt14_translate/de-en" (downloaded and prepared by tfds if not in `data_dir`)."""
  del path  # tfds finds the data in data_dir.
  _import_tfds_builder(name)
  source = tfds.data_source(name, split=_TFDS_SPLITS[split], data_dir=data_dir)
  languages = sorted(source.dataset_info.features.keys())
  for lang in (source_lang, target_lang):
    if lang not in languages:
      raise ValueError(f"dataset '{name}' has no language '{lang}'; its languages are {languages} (set "
                       "source_lang/target_lang to two of them).")
  return TextPairSource(source, inputs_key=source_lang, targets_key=target_lang)


def _import_tfds_builder(name: str) -> None:
  """Registers the tfds builder of `name` ("wmt14_translate/de-en" -> `tensorflow_datasets.translate.wmt14`).

  The builder modules are imported one by one: `import tensorflow_datasets.translate` needs TensorFlow.
  """
  module = "tensorflow_datasets.translate." + name.split("/")[0].removesuffix("_translate")
  try:
    importlib.import_module(module)
  except ImportError as e:
    raise ValueError(f"dataset '{name}': cannot import its tfds builder module {module} ({e}); use a tfds "
                     "translation dataset name such as 'wmt14_translate/de-en'.") from e
