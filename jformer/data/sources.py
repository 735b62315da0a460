"""The dataset registry: `config.data.dataset` -> random-access sources of translation pairs
(`TextPairSource`: `{"inputs": str, "targets": str}`) or of language-modelling documents (`DocumentSource`:
`{"text": str}`).

Every dataset has the splits "train", "valid" and "test". A loader is registered under a name or a glob pattern:

    @register_dataset("my_corpus")
    def load_my_corpus(name, split, *, path, data_dir, source_lang, target_lang) -> TextPairSource: ...

Registered here:
  "parallel_text"          a folder of aligned `{train,valid,test}.{src,tgt}[.gz]` files (`path`; "" = the bundled
                           gettext en->de corpus), prepared as a tfds ArrayRecord dataset under `data_dir`.
                           `.src` is the source side; `source_lang`/`target_lang` are not used.
  "wmt*_translate/*"       tfds translation datasets, e.g. "wmt14_translate/de-en", read with `tfds.data_source`
                           from `data_dir`; `source_lang`/`target_lang` pick the direction (default en -> de).
  "text"                   documents: a folder of `{train,valid,test}.txt[.gz]`, documents separated by blank lines
                           (`path`; "" = the bundled English corpus, `bundled_text_path()`), prepared as a tfds
                           ArrayRecord dataset under `data_dir` (`documents.py`).
  "lm1b"                   tfds One Billion Word benchmark, one sentence per document. It has no validation split:
                           "valid" reads its "test" split too (as the Flax lm1b example evaluates), so valid and
                           test scores of lm1b are the same data.
  "wiki40b/*"              tfds Wiki-40B articles, e.g. "wiki40b/en" (text with its `_START_ARTICLE_` etc. markers).
  "mqar", "induction",     the synthetic tasks (`synthetic/`), generated from `data.seed` with no files: rows of
  "selective_copy",        token ids with the answer positions as loss weights (`synthetic/dataset.py`), for
  "listops"                `model.architecture="synthetic"`; their options are set in `data.dataset_options`.

A dataset entry with an `options` attribute ({option: default}, e.g. a `SyntheticDataset`) takes options (from
`data.dataset_options`) and the data seed as keyword arguments; the others take neither.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Iterator, Mapping, Sequence

import tensorflow_datasets as tfds
from absl import logging

from jformer.data import documents, parallel_text, records
from jformer.data.documents import DocumentSource
from jformer.data.synthetic import TASKS as SYNTHETIC_TASKS
from jformer.data.synthetic.dataset import SyntheticDataset, SyntheticSource
from jformer.registry import Registry, caller, check_options

SPLITS = ("train", "valid", "test")
_TFDS_SPLITS = {"train": "train", "valid": "validation", "test": "test"}
_LM1B_SPLITS = {"train": "train", "valid": "test", "test": "test"}  # lm1b has no validation split.

Loader = Callable[..., "TextPairSource | DocumentSource"]
REGISTRY: Registry[Loader] = Registry("dataset", patterns=True)


class TextPairSource(records.RecordView):
  """Random-access view of a tfds data source as `{"inputs": str, "targets": str}` elements.

  Args:
    source: a sequence of feature dicts (`tfds.data_source` / `builder.as_data_source`), text as bytes or str.
    inputs_key: the feature that becomes "inputs" (source language).
    targets_key: the feature that becomes "targets" (target language).
    indices: the records of `source` this view holds, in order; None = all (`shard` makes one host's view).
  """

  def __init__(self, source: Sequence[dict[str, Any]], *, inputs_key: str, targets_key: str,
               indices: range | None = None):
    super().__init__(source, indices=indices)
    self._keys = (inputs_key, targets_key)

  def __repr__(self) -> str:
    return (f"TextPairSource({self._source!r}, inputs={self._keys[0]!r}, targets={self._keys[1]!r}"
            f"{self._view_repr()})")

  def _element(self, example: dict[str, Any]) -> dict[str, str]:
    inputs, targets = (records.as_str(example[k]) for k in self._keys)
    return {"inputs": inputs, "targets": targets}


def register_dataset(name: str) -> Callable[[Loader], Loader]:
  """Decorator registering `loader(name, split, *, path, data_dir, source_lang, target_lang)`, which returns a
  `TextPairSource` (translation) or a `DocumentSource` (language modelling).

  `name` may be a glob pattern ("wmt*_translate/*"); the loader then gets the full name it was asked for.
  """
  return REGISTRY.register(name, origin=caller())


def get_dataset(name: str) -> Loader:
  """The loader registered for `name` (exact names first, then patterns); unknown names raise a KeyError that lists
  the known ones."""
  return REGISTRY.get(name)


def available_datasets() -> list[str]:
  """Sorted registered names and patterns."""
  return REGISTRY.available()


def dataset_options(name: str) -> dict[str, Any]:
  """{option: default} of the options dataset `name` takes in `data.dataset_options` ({} for most datasets)."""
  return dict(getattr(get_dataset(name), "options", {}))


def check_dataset_options(name: str, options: Mapping[str, Any]) -> None:
  """Refuses `options` dataset `name` does not take (ValueError naming them and the ones it takes)."""
  known = dataset_options(name)
  check_options(f"dataset '{name}'", "data.dataset_options", known, {}, dict(options))


def synthetic_entry(name: str) -> SyntheticDataset | None:
  """The entry of dataset `name` if it is a synthetic task (generated rows, fixed vocabulary), else None."""
  entry = get_dataset(name)
  return entry if isinstance(entry, SyntheticDataset) else None


def load_split(dataset: str, split: str, *, path: str = "", data_dir: str | None = None, source_lang: str = "en",
               target_lang: str = "de", seed: int = 0,
               options: Mapping[str, Any] | None = None) -> TextPairSource | DocumentSource | SyntheticSource:
  """The `split` ("train", "valid" or "test") of `dataset`: `{"inputs": str, "targets": str}` pairs
  (`TextPairSource`) or `{"text": str}` documents (`DocumentSource`), as the dataset holds.

  Args:
    dataset: a registered name (`available_datasets()`).
    split: "train", "valid" or "test".
    path: dataset-specific location (the folder for "parallel_text" and "text"; "" = the bundled corpus).
    data_dir: tfds data directory (where prepared datasets live); None = tfds's default.
    source_lang, target_lang: translation direction, for datasets with several languages.
    seed, options: the data seed and `data.dataset_options`, for a dataset that takes options (a synthetic
      task: rows `{"targets", ..., "targets_weights"}`, `SyntheticSource`); others refuse options.
  """
  if split not in SPLITS:
    raise ValueError(f"unknown split '{split}'; splits are {SPLITS}")
  loader = get_dataset(dataset)
  check_dataset_options(dataset, options or {})
  extra = dict(seed=seed, **(options or {})) if hasattr(loader, "options") else {}
  return loader(dataset, split, path=path, data_dir=data_dir, source_lang=source_lang, target_lang=target_lang,
                **extra)


def pair_texts(source: TextPairSource) -> Iterator[str]:
  """Both sides of every pair (inputs, then targets), e.g. to train a shared vocabulary."""
  for pair in source:
    yield pair["inputs"]
    yield pair["targets"]


def document_lines(source: DocumentSource) -> Iterator[str]:
  """The non-empty lines of every document: SentencePiece's training sentences (it skips inputs over 4192 bytes,
  which a whole document often is)."""
  for document in source:
    yield from (line for line in document["text"].split("\n") if line.strip())


def training_texts(source: TextPairSource | DocumentSource) -> Iterator[str]:
  """The texts to train a vocabulary on: both sides of every pair (`pair_texts`), or every document's non-empty
  lines (`document_lines`)."""
  return document_lines(source) if isinstance(source, DocumentSource) else pair_texts(source)


def bundled_corpus_path() -> str:
  """The folder of the bundled gettext English->German corpus (`jformer/data/corpora/gettext_en_de`)."""
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpora", "gettext_en_de")


def bundled_text_path() -> str:
  """The folder of the bundled English documents of the "text" dataset (`jformer/data/corpora/english_text`)."""
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpora", "english_text")


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
  _import_tfds_builder(name, "translate", example="'wmt14_translate/de-en'")
  source = tfds.data_source(name, split=_TFDS_SPLITS[split], data_dir=data_dir)
  languages = sorted(source.dataset_info.features.keys())
  for lang in (source_lang, target_lang):
    if lang not in languages:
      raise ValueError(f"dataset '{name}' has no language '{lang}'; its languages are {languages} (set "
                       "source_lang/target_lang to two of them).")
  return TextPairSource(source, inputs_key=source_lang, targets_key=target_lang)


@register_dataset("text")
def load_text(name: str, split: str, *, path: str, data_dir: str | None, source_lang: str,
              target_lang: str) -> DocumentSource:
  """A folder of documents (`path`, "" = the bundled English corpus; see `documents.py`)."""
  del name, source_lang, target_lang  # Monolingual.
  builder = documents.prepare(path or bundled_text_path(), data_dir)
  return DocumentSource(builder.as_data_source(split), text_key="text")


@register_dataset("lm1b")
@register_dataset("wiki40b/*")
def load_tfds_text(name: str, split: str, *, path: str, data_dir: str | None, source_lang: str,
                   target_lang: str) -> DocumentSource:
  """A tfds language-modelling dataset whose "text" feature is a document: "lm1b" (valid = its test split, see
  the module docstring) or "wiki40b/<language>" (downloaded and prepared by tfds if not in `data_dir`)."""
  del path, source_lang, target_lang  # tfds finds the data in data_dir; monolingual.
  _import_tfds_builder(name, "text", example="'lm1b' or 'wiki40b/en'")
  splits = _LM1B_SPLITS if name == "lm1b" else _TFDS_SPLITS
  if splits[split] != _TFDS_SPLITS[split]:
    logging.warning("dataset '%s' has no '%s' split; reading its '%s' split as '%s'.", name, _TFDS_SPLITS[split],
                    splits[split], split)
  return DocumentSource(tfds.data_source(name, split=splits[split], data_dir=data_dir), text_key="text")


def _import_tfds_builder(name: str, package: str, *, example: str) -> None:
  """Registers the tfds builder of `name` by importing its module, e.g. "wmt14_translate/de-en" ->
  `tensorflow_datasets.translate.wmt14`, "wiki40b/en" -> `tensorflow_datasets.text.wiki40b`.

  The builder modules are imported one by one: `import tensorflow_datasets.<package>` needs TensorFlow.

  Args:
    name: the tfds dataset name.
    package: the tfds package of its builder ("translate", "text").
    example: dataset names to suggest if the import fails.
  """
  module = f"tensorflow_datasets.{package}." + name.split("/")[0].removesuffix("_translate")
  try:
    importlib.import_module(module)
  except ImportError as e:
    raise ValueError(f"dataset '{name}': cannot import its tfds builder module {module} ({e}); use a tfds "
                     f"{package} dataset name such as {example}.") from e


for _task in SYNTHETIC_TASKS:  # "mqar", "induction", "selective_copy", "listops".
  REGISTRY.add(_task, SyntheticDataset(_task))
del _task
