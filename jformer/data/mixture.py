"""Data mixtures (`data.mixture`): a language model's training rows drawn from several document datasets by weight.

    config.data.mixture = {"web": {"dataset": "text", "path": "corpora/web", "weight": 3},
                           "books": {"dataset": "text", "path": "corpora/books", "weight": 1}}

Each source is a document dataset named as `data.dataset` and `data.path` name one (which a mixture replaces), read,
tokenized with the run's one vocabulary (trained on every source's training text) and cut into pieces or stream
rows (`data.pack`) on each host as one dataset is (`lm_pipeline.train_elements`), with a seed of its own. grain's
`MapDataset.mix` then draws the mixture's element i from source j in proportion to the weights, deterministically
(an element's index names its source and its index there), and the elements are packed and batched as one
dataset's. So the data order is a function of (data.seed, the sources, the hosts), and the iterator's state in a
checkpoint resumes it exactly. The weights are proportions of elements: of pieces of at most data.max_length
tokens with pack='documents' (a source of short documents gives fewer tokens per piece), of rows of exactly
data.max_length tokens with pack='stream'.

Every element carries its source's number on each token (`SOURCE`) through packing; `CountedBySource` takes it out
of the batches and counts each source's training tokens, the counts part of the iterator's state (exact on
resume). Evaluation reads each source's splits on its own (`LMDatasets.sources`): per-source bits per byte beside
those of all sources together (`jformer.tasks.language_model`).

Refused in one line: a mixture for another task than language modelling, and a source whose task or tokenizer
differs from the others' (translation pairs; a synthetic task, whose rows carry its own token ids).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Iterator

import grain
import numpy as np

from jformer.data import sources as sources_lib
from jformer.data.documents import DocumentSource
from jformer.data.lm_pipeline import (LMDatasets, TokenizedDocuments, document_splits, train_batches, train_elements,
                                      training_documents)
from jformer.data.tokenizer import Tokenizer

SOURCE_KEYS = ("dataset", "path", "weight")  # what a source sets; path defaults to "" (the bundled corpus).
SOURCE = "source"  # the per-token source number (1, 2, ... in the mixture's order; 0 = padding) of a batch.
MIX = "documents for a language model (model.architecture='lm'), tokenized with the run's SentencePiece vocabulary"


@dataclasses.dataclass(frozen=True)
class Source:
  """One dataset of a mixture: its name in `data.mixture`, the dataset and path, and its weight."""
  name: str
  dataset: str
  path: str
  weight: float


def parse(mixture) -> tuple[Source, ...]:
  """`data.mixture` ({name: {dataset, path, weight}}) as `Source`s sorted by name (the order its seeds and source
  numbers follow, whatever order a config file or config.json gives); raises ValueError naming every problem (a key
  a source does not take, a missing dataset, a weight not above 0, fewer than 2 sources)."""
  problems, parsed = [], []
  for name, values in sorted(dict(mixture or {}).items()):
    values = dict(values or {})
    unknown = sorted(set(values) - set(SOURCE_KEYS))
    if unknown:
      problems.append(f"data.mixture.{name} sets {unknown}; a source sets only {list(SOURCE_KEYS)}")
    weight = values.get("weight")
    if not isinstance(values.get("dataset"), str) or not isinstance(weight, (int, float)) or weight <= 0:
      problems.append(f"data.mixture.{name} needs a 'dataset' name and a 'weight' above 0, e.g. {{'dataset': "
                      f"'text', 'path': 'corpora/web', 'weight': 1.0}}; got {values}")
      continue
    parsed.append(Source(name, values["dataset"], str(values.get("path", "")), float(weight)))
  if mixture and len(dict(mixture)) < 2:
    problems.append("data.mixture names one source; a mixture needs two or more (one dataset: data.dataset)")
  if problems:
    raise ValueError("; ".join(problems))
  return tuple(parsed)


def problems(config) -> list[str]:
  """What is wrong with `config.data.mixture` given the rest of the config, each a sentence naming the fix: its
  sources (`parse`), unknown datasets, a task other than language modelling, a synthetic source (its own
  tokenizer), keys a mixture replaces (`data.path`) or cannot serve (`train.recipe`, which measures one dataset)."""
  if not config.data.mixture:
    return []
  try:
    mixture = parse(config.data.mixture)
    for source in mixture:
      sources_lib.get_dataset(source.dataset)
  except (KeyError, ValueError) as e:
    return [e.args[0]]
  found = []
  if config.model.architecture != "lm":
    found.append(f"data.mixture mixes {MIX}, not rows for model.architecture='{config.model.architecture}'; set "
                 "model.architecture='lm', or train on one dataset (data.dataset) without data.mixture")
  for source in mixture:
    if sources_lib.synthetic_entry(source.dataset) is not None:
      found.append(refusal(source, "a synthetic task's rows, whose token ids are its own (another tokenizer)"))
  if config.data.path:
    found.append(f"data.path='{config.data.path}' is not read with data.mixture (each source names its own path); "
                 "set data.path=''")
  if config.train.recipe:
    found.append("train.recipe measures one dataset (data.dataset), not a mixture; choose the keys on the command "
                 "line, or train without data.mixture")
  return found


def refusal(source: Source, holds: str) -> str:
  """The one line refusing `source`, which holds `holds` where a mixture mixes `MIX`."""
  return (f"data.mixture.{source.name} (dataset '{source.dataset}') holds {holds}, but the sources of a mixture "
          f"share one task and one tokenizer: {MIX}; mix document datasets (text, lm1b, wiki40b/*)")


def sources_of(config) -> tuple[Source, ...]:
  """The sources of `config.data.mixture` (checked when the config was validated); () without a mixture."""
  return parse(config.data.mixture)


def dataset_paths(config) -> list[tuple[str, str]]:
  """(dataset, path) of what the run reads: `data.dataset` and `data.path`, or each mixture source's."""
  return [(s.dataset, s.path) for s in sources_of(config)] or [(config.data.dataset, config.data.path)]


def source_seed(seed: int, index: int) -> int:
  """The shuffle seed of a mixture's source `index` (independent streams for one `data.seed`)."""
  return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def with_source(number: int):
  """An element map adding `SOURCE`: `number` on each of the element's target tokens."""
  def tag(element: dict) -> dict:
    return {**element, SOURCE: np.full(len(element["targets"]), number, np.int32)}
  return tag


def mixed_train_dataset(documents: list[TokenizedDocuments], weights: list[float], *, batch_size: int,
                        max_length: int, pack: str, seed: int, prefetch: int = 0) -> CountedBySource:
  """Training batches of one host drawn from the sources' `documents` in proportion to `weights` (module doc), each
  source's elements shuffled with its own seed and repeated forever; `iter()` of it is a checkpointable iterator
  whose `tokens` are each source's training tokens so far."""
  parts = [train_elements(docs, max_length=max_length, pack=pack, seed=source_seed(seed, i), num_epochs=None)
           .map(with_source(i + 1)) for i, docs in enumerate(documents)]
  mixed = grain.MapDataset.mix(parts, weights)
  batches = train_batches(mixed, features=("targets", SOURCE), batch_size=batch_size, max_length=max_length,
                          pack=pack, seed=seed, drop_remainder=True, prefetch=prefetch)
  return CountedBySource(batches, len(documents))


class CountedBySource(grain.IterDataset):
  """Batches of `parent` without their `SOURCE` keys, whose tokens its iterator counts per source (module doc)."""

  def __init__(self, parent: grain.IterDataset, num_sources: int):
    super().__init__(parent)
    self.num_sources = num_sources

  def __iter__(self) -> _CountingIterator:
    return _CountingIterator(self._parent.__iter__(), self.num_sources)


class _CountingIterator(grain.DatasetIterator):
  """`next()`: the parent's batch without `SOURCE` (and its `_segmentation`, `_position` from packing), adding its
  tokens of source i + 1 to `tokens[i]`; the state holds the parent's and the counts."""

  def __init__(self, parent: grain.DatasetIterator, num_sources: int):
    super().__init__(parent)
    self.tokens = np.zeros(num_sources, np.int64)

  def __next__(self) -> dict:
    batch = dict(next(self._parent))
    numbers = batch.pop(SOURCE)
    for key in (f"{SOURCE}_segmentation", f"{SOURCE}_position"):
      batch.pop(key, None)
    self.tokens += np.bincount(numbers.ravel(), minlength=len(self.tokens) + 1)[1:]
    return batch

  def get_state(self) -> dict:
    return {"batches": self._parent.get_state(), "tokens_by_source": self.tokens.tolist()}

  def set_state(self, state: dict) -> None:
    self._parent.set_state(state["batches"])
    self.tokens = np.asarray(state["tokens_by_source"], np.int64)


def concatenated(parts: list[TokenizedDocuments]) -> TokenizedDocuments:
  """The documents of `parts`, one after the other."""
  starts = np.cumsum([0] + [part.num_tokens() for part in parts])
  offsets = np.concatenate([[0]] + [part.offsets[1:] + start for part, start in zip(parts, starts)])
  return TokenizedDocuments(np.concatenate([part.tokens for part in parts]), offsets.astype(np.int64))


def make_mixture_datasets(mixture: tuple[Source, ...], *, tokenizer: Tokenizer, batch_size: int, max_length: int,
                          pack: str = "documents", seed: int = 0, eval_batch_size: int | None = None,
                          shard_index: int | None = None, shard_count: int | None = None,
                          data_dir: str | None = None, prefetch: int = 2) -> LMDatasets:
  """The training iterator (`mixed_train_dataset`) and eval accessors of a mixture's sources for this host, as
  `lm_pipeline.make_lm_datasets` gives them for one dataset (its arguments); `sources` holds each source's
  splits, `eval_batches`, `split_bytes` and `documents` read all of them together."""
  splits = {s.name: document_splits(s.dataset, tokenizer, path=s.path, data_dir=data_dir, max_length=max_length,
                                    eval_batch_size=eval_batch_size or batch_size, shard_index=shard_index,
                                    shard_count=shard_count) for s in mixture}
  documents = [training_documents(part) for part in splits.values()]
  train = iter(mixed_train_dataset(documents, [s.weight for s in mixture], batch_size=batch_size,
                                   max_length=max_length, pack=pack, seed=seed, prefetch=prefetch))

  def eval_batches(split: str = "valid", max_length: int | None = None) -> Iterator[dict]:
    return itertools.chain.from_iterable(part.eval_batches(split, max_length) for part in splits.values())

  first = next(iter(splits.values()))
  return LMDatasets(
      train=train, train_documents=concatenated(documents), eval_batches=eval_batches,
      split_bytes=lambda split: sum(part.split_bytes(split) for part in splits.values()),
      documents=lambda split: [text for part in splits.values() for text in part.documents(split)], pack=pack,
      max_length=max_length, shard_index=first.shard_index, shard_count=first.shard_count,
      split_sizes={"train": sum(part.split_sizes["train"] for part in splits.values())}, sources=splits)
