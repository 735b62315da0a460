"""grain input pipelines for language modelling: documents -> tokens + EOS -> packed or streamed rows, per host.

A batch is a dict of int32 numpy arrays, each `[rows, max_length]`, with the keys `LM_BATCH_KEYS`:
  targets                 token ids, 0 = padding; every document ends with EOS (1).
  targets_segmentation    1, 2, 3... = which packed piece of the row a token belongs to, 0 = padding.
  targets_position        position of the token within its piece (0 at padding).
The model's input is the targets shifted right with BOS (0) in front of every segment (`models.transformer`), and
attention stays within a segment (`ops.masks.segment_mask`).

Training rows (`data.pack`):
  "documents"   every document (tokens + EOS) is cut into pieces of at most max_length tokens, and the pieces are
                packed into rows (grain's first fit over `batch_size` rows at a time): a segment is one piece, its
                positions start at 0, and no token attends to another document's (nor to an earlier piece of its
                own document).
  "stream"      all documents (tokens + EOS) concatenated, in a shuffled document order each epoch, and cut into
                contiguous rows of max_length tokens (rows in a shuffled order too): segmentation 1 and positions
                0..max_length-1 for the whole row, so a token attends across document boundaries to the
                documents before it in the row. That is the point of stream mode (context, no padding); the
                last `num_tokens % max_length` tokens of each epoch's concatenation (a different tail each epoch)
                are not trained on.

Each host (`shard_index` of `shard_count`) reads and tokenizes only its documents shard_index::shard_count, once,
and keeps them in memory as ragged int32 arrays (`TokenizedDocuments`). The training iterator is a grain
`DatasetIterator` (`get_state()`/`set_state()` resume it exactly, with the same number of hosts), built ahead in a
background thread.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Callable, Iterable

import grain
import jax
import numpy as np

from jformer.data import sources
from jformer.data.documents import DocumentSource
from jformer.data.hosts import largest_over_hosts
from jformer.data.pipeline import batch_keys, batched, eval_dataset, pack_and_batch, ragged
from jformer.data.tokenizer import Tokenizer

LM_FEATURES = ("targets",)
LM_BATCH_KEYS = batch_keys(LM_FEATURES)
PACKS = ("documents", "stream")
_ENCODE_CHUNK = 1024  # Documents per `encode_batch` call.


@dataclasses.dataclass(frozen=True)
class TokenizedDocuments:
  """Token ids of documents (or of pieces of them), ragged: element i is `tokens[offsets[i]:offsets[i + 1]]`.

  Attributes:
    tokens: flat int32 token ids; every document ends with EOS.
    offsets: int64 `[num_elements + 1]` element boundaries.
  """
  tokens: np.ndarray
  offsets: np.ndarray

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def __getitem__(self, index: int) -> dict[str, np.ndarray]:
    """`{"targets": int32[n]}` of element `index`."""
    i = index.__index__()
    return {"targets": self.tokens[self.offsets[i]:self.offsets[i + 1]]}

  def lengths(self) -> np.ndarray:
    """int64 `[num_elements]` token counts."""
    return np.diff(self.offsets)

  def num_tokens(self) -> int:
    return len(self.tokens)

  def pieces(self, max_length: int) -> TokenizedDocuments:
    """Every element cut into consecutive pieces of `max_length` tokens (the last piece of each, the rest), in
    order: the same tokens, more boundaries."""
    if max_length < 1:
      raise ValueError(f"max_length={max_length}; pieces need at least 1 token (use max_length >= 1).")
    lengths = self.lengths()
    counts = -(-lengths // max_length)
    first = np.repeat(np.cumsum(counts) - counts, counts)  # index of each piece's first sibling.
    starts = np.repeat(self.offsets[:-1], counts) + max_length * (np.arange(counts.sum()) - first)
    return TokenizedDocuments(self.tokens, np.append(starts, self.offsets[-1]).astype(np.int64))


def tokenize_documents(source: Iterable[dict[str, str]], tokenizer: Tokenizer) -> TokenizedDocuments:
  """Each `{"text": str}` document of `source` (e.g. a `DocumentSource`) encoded as its tokens + EOS."""
  chunks = []
  it = iter(source)
  while chunk := list(itertools.islice(it, _ENCODE_CHUNK)):
    chunks.append(ragged(tokenizer.encode_batch([document["text"] for document in chunk])))
  if not chunks:
    return TokenizedDocuments(np.zeros(0, np.int32), np.zeros(1, np.int64))
  sizes = np.array([len(tokens) for tokens, _ in chunks])
  starts = np.cumsum(sizes) - sizes  # of each chunk in the flat tokens.
  offsets = np.concatenate([[0]] + [offsets[1:] + start for (_, offsets), start in zip(chunks, starts)])
  return TokenizedDocuments(np.concatenate([tokens for tokens, _ in chunks]), offsets.astype(np.int64))


class StreamRows:
  """Rows of "stream" packing: epoch e's concatenation of the documents in a seeded random order, cut into
  `rows_per_epoch` contiguous rows of `max_length` tokens (see the module docstring).

  Args:
    documents: this host's tokenized documents.
    max_length: tokens per row.
    seed: seed of the document order (combined with the epoch).
  """

  def __init__(self, documents: TokenizedDocuments, max_length: int, seed: int):
    self.documents = documents
    self.max_length = max_length
    self.seed = seed
    self.rows_per_epoch = documents.num_tokens() // max_length
    if not self.rows_per_epoch:
      raise ValueError(f"{documents.num_tokens()} training tokens fill no row of max_length={max_length}; lower "
                       "data.max_length or give more documents.")
    self.order = functools.lru_cache(maxsize=2)(self._order)

  def _order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """Epoch `epoch`'s document order and the int64 `[num_documents + 1]` offsets of each document in its
    concatenation."""
    order = np.random.default_rng([self.seed, epoch]).permutation(len(self.documents))
    starts = np.zeros(len(order) + 1, np.int64)
    np.cumsum(self.documents.lengths()[order], out=starts[1:])
    return order, starts

  def row(self, index: int, row_of_epoch: int) -> dict[str, np.ndarray]:
    """Row `row_of_epoch` of epoch `index // rows_per_epoch` (`index`: the row's place in the stream of all
    epochs, as `MapDataset.map_with_index` gives it): the keys `LM_BATCH_KEYS`, each int32 `[max_length]`."""
    order, starts = self.order(index // self.rows_per_epoch)
    position = row_of_epoch * self.max_length
    j = int(np.searchsorted(starts, position, side="right")) - 1
    tokens = np.empty(self.max_length, np.int32)
    filled = 0
    while filled < self.max_length:
      begin = self.documents.offsets[order[j]] + position - starts[j]
      take = min(self.max_length - filled, int(starts[j + 1] - position))
      tokens[filled:filled + take] = self.documents.tokens[begin:begin + take]
      filled, position, j = filled + take, position + take, j + 1
    return {"targets": tokens, "targets_segmentation": np.ones(self.max_length, np.int32),
            "targets_position": np.arange(self.max_length, dtype=np.int32)}


def lm_train_dataset(documents: TokenizedDocuments, *, batch_size: int, max_length: int, pack: str = "documents",
                     seed: int = 0, num_epochs: int | None = None, drop_remainder: bool = True,
                     prefetch: int = 0) -> grain.IterDataset:
  """Training batches of one host from its tokenized documents, shuffled differently each epoch.

  Args:
    documents: this host's documents (tokens + EOS each).
    batch_size: rows per batch on this host.
    max_length: tokens per row.
    pack: "documents" (pieces packed with segment ids, no attention across documents) or "stream" (contiguous
      rows across documents); see the module docstring.
    seed: shuffle (and packing) seed.
    num_epochs: passes over the data; None = forever.
    drop_remainder: drop the last partial batch of a finite run (else it has fewer rows).
    prefetch: batches built ahead in a background thread; 0 = none.

  Returns:
    An IterDataset of batches (dicts of int32 `[batch_size, max_length]`, keys `LM_BATCH_KEYS`); `iter()` of it
    is a checkpointable `grain.DatasetIterator`.
  """
  if pack not in PACKS:
    raise ValueError(f"data.pack={pack!r}; use one of {PACKS}.")
  if not len(documents):
    raise ValueError("no training documents on this host; give more documents or, with several hosts, use fewer.")
  return train_batches(train_elements(documents, max_length=max_length, pack=pack, seed=seed, num_epochs=num_epochs),
                       features=LM_FEATURES, batch_size=batch_size, max_length=max_length, pack=pack, seed=seed,
                       drop_remainder=drop_remainder, prefetch=prefetch)


def train_elements(documents: TokenizedDocuments, *, max_length: int, pack: str, seed: int,
                   num_epochs: int | None) -> grain.MapDataset:
  """What training rows are made of, in a seeded order, shuffled differently each epoch: the documents' pieces of
  at most `max_length` tokens (`{"targets"}`, packed into rows by `train_batches`) for pack="documents", whole rows
  (`StreamRows.row`) for pack="stream"."""
  if pack == "documents":
    return grain.MapDataset.source(documents.pieces(max_length)).shuffle(seed).repeat(num_epochs)
  stream = StreamRows(documents, max_length, seed)
  return grain.MapDataset.range(stream.rows_per_epoch).shuffle(seed).repeat(num_epochs).map_with_index(stream.row)


def train_batches(elements: grain.MapDataset, *, features: tuple[str, ...], batch_size: int, max_length: int,
                  pack: str, seed: int, drop_remainder: bool, prefetch: int) -> grain.IterDataset:
  """Batches of `train_elements`: pieces packed into rows (their `features`, `pipeline.pack_and_batch`), or stream
  rows batched as they are."""
  elements = elements.to_iter_dataset(grain.ReadOptions(num_threads=0))
  if pack == "documents":
    return pack_and_batch(elements, features=features, batch_size=batch_size, max_length=max_length, packing=True,
                          seed=seed, drop_remainder=drop_remainder, prefetch=prefetch)
  return batched(elements, batch_size=batch_size, drop_remainder=drop_remainder, prefetch=prefetch)


def lm_eval_dataset(documents: TokenizedDocuments, *, batch_size: int, max_length: int,
                    min_rows: int = 0) -> grain.MapDataset:
  """Eval batches of one host: every token of its documents once, each document cut into consecutive pieces of at
  most `max_length` tokens, one piece per row from position 0, in order; all-padding rows fill the last batch up to
  `ceil(max(pieces, min_rows) / batch_size)` batches (`pipeline.eval_dataset`)."""
  return eval_dataset(documents.pieces(max_length), batch_size=batch_size, max_length=max_length,
                      min_examples=min_rows, features=LM_FEATURES)


class DocumentSplits:
  """One document dataset's splits on one host (its documents shard_index, shard_index + shard_count, ...), each
  read (and tokenized) once, when first asked for.

  Args:
    dataset, path, data_dir: which documents (see `sources.load_split`): "text", "lm1b", "wiki40b/en", ...
    tokenizer: the vocabulary.
    max_length: the default tokens per eval row.
    eval_batch_size: eval rows per batch on this host.
    shard_index, shard_count: this host and the number of hosts that share the data.
  """

  def __init__(self, dataset: str, tokenizer: Tokenizer, *, path: str, data_dir: str | None, max_length: int,
               eval_batch_size: int, shard_index: int, shard_count: int):
    self.dataset, self.tokenizer, self.path, self.data_dir = dataset, tokenizer, path, data_dir
    self.max_length, self.eval_batch_size = max_length, eval_batch_size
    self.shard_index, self.shard_count = shard_index, shard_count
    self.split_sizes: dict[str, int] = {}  # documents per split of the whole dataset (all hosts), once read.
    self._tokenized: dict[str, TokenizedDocuments] = {}
    self._eval_rows: dict[tuple[str, int], int] = {}
    self._texts: dict[str, list[str]] = {}
    self._bytes: dict[str, int] = {}

  def load(self, split: str) -> DocumentSource:
    """The whole `split` (all hosts' documents)."""
    source = sources.load_split(self.dataset, split, path=self.path, data_dir=self.data_dir)
    if not isinstance(source, DocumentSource):
      raise ValueError(f"dataset '{self.dataset}' holds translation pairs, not documents; a language model needs a "
                       "document dataset such as 'text', 'lm1b' or 'wiki40b/en' (or model.architecture="
                       "'transformer' for translation).")
    self.split_sizes[split] = len(source)
    return source

  def tokenized(self, split: str) -> TokenizedDocuments:
    """This host's documents of `split`, tokenized."""
    if split not in self._tokenized:
      self._tokenized[split] = tokenize_documents(self.load(split).shard(self.shard_index, self.shard_count),
                                                  self.tokenizer)
    return self._tokenized[split]

  def eval_batches(self, split: str = "valid", max_length: int | None = None) -> grain.MapDataset:
    """This host's eval batches of `split` at `max_length` tokens per row (None = the training max_length), as
    many as every other host's (`lm_eval_dataset`; the first call for a (split, length) gathers every host's row
    count, `largest_over_hosts`: all hosts make it together, as a multi-host eval loop does)."""
    length = max_length or self.max_length
    documents = self.tokenized(split)
    if (split, length) not in self._eval_rows:
      self._eval_rows[split, length] = int(largest_over_hosts(len(documents.pieces(length)), self.shard_count,
                                                              "eval batches"))
    return lm_eval_dataset(documents, batch_size=self.eval_batch_size, max_length=length,
                           min_rows=self._eval_rows[split, length])

  def documents(self, split: str) -> list[str]:
    """The whole split's document strings, in order."""
    if split not in self._texts:
      self._texts[split] = [document["text"] for document in self.load(split)]
    return self._texts[split]

  def split_bytes(self, split: str) -> int:
    """The bits-per-byte denominator of the whole split (all hosts): the sum over its documents of
    `len(document.encode("utf-8")) + 1`, the +1 being the document's end, which its EOS token predicts."""
    if split not in self._bytes:
      texts = self._texts[split] if split in self._texts else (document["text"] for document in self.load(split))
      self._bytes[split] = sum(len(text.encode("utf-8")) + 1 for text in texts)
    return self._bytes[split]


@dataclasses.dataclass
class LMDatasets:
  """What `make_lm_datasets` returns.

  Attributes:
    train: this host's checkpointable training iterator (`next()` -> batch; `get_state()`/`set_state()`).
    train_documents: this host's tokenized training documents (its shard of the split).
    eval_batches: `eval_batches(split="valid", max_length=None)` -> a fresh finite iterable of this host's eval
      batches (`DocumentSplits.eval_batches`) at `max_length` tokens per row (None = the training max_length); every
      host gets the same number of batches.
    split_bytes: `split_bytes(split)` -> the bits-per-byte denominator of the whole split (all hosts,
      `DocumentSplits.split_bytes`).
    documents: `documents(split)` -> the whole split's document strings, in order.
    pack: "documents" or "stream" (training rows).
    max_length: training tokens per row.
    shard_index, shard_count: this host and the number of hosts that share the data.
    split_sizes: documents per split of the whole dataset (all hosts), for the splits read so far.
    sources: a mixture's sources by name (`jformer.data.mixture`), each its own `DocumentSplits`; {} for one dataset.
      Then `eval_batches`, `split_bytes` and `documents` are those of all sources together.
  """
  train: grain.DatasetIterator
  train_documents: TokenizedDocuments
  eval_batches: Callable[..., Iterable[dict[str, np.ndarray]]]
  split_bytes: Callable[[str], int]
  documents: Callable[[str], list[str]]
  pack: str = "documents"
  max_length: int = 0
  shard_index: int = 0
  shard_count: int = 1
  split_sizes: dict[str, int] = dataclasses.field(default_factory=dict)
  sources: dict[str, DocumentSplits] = dataclasses.field(default_factory=dict)

  def describe(self, max_length: int) -> str:
    """One line on this host's training data, e.g. 'data: 400 training documents (12,345 tokens with EOS),
    pack='documents': 450 pieces of at most 64 tokens' (with several hosts: '..., host 0 of 2 (800 documents in
    the split)'; a mixture names each source's documents and tokens)."""
    docs = self.train_documents
    line = f"data: {len(docs):,} training documents ({docs.num_tokens():,} tokens with EOS), pack='{self.pack}': "
    if self.pack == "documents":
      line += f"{len(docs.pieces(max_length)):,} pieces of at most {max_length} tokens"
    else:
      line += f"{docs.num_tokens() // max_length:,} contiguous rows of {max_length} tokens per epoch"
    if self.sources:
      line += "; mixture of " + ", ".join(
          f"{name} ({len(s.tokenized('train')):,} documents, {s.tokenized('train').num_tokens():,} tokens)"
          for name, s in self.sources.items())
    if self.shard_count > 1:
      line += f", host {self.shard_index} of {self.shard_count} ({self.split_sizes['train']:,} documents in the split)"
    return line

  def tokens_by_source(self) -> dict[str, int]:
    """{source: training tokens (EOS included) read from it so far}: a mixture's counts, kept in its iterator's
    state (`mixture.CountedBySource`), so exact on resume; {} for one dataset."""
    return dict(zip(self.sources, self.train.tokens.tolist())) if self.sources else {}


def make_lm_datasets(*, dataset: str, tokenizer: Tokenizer, batch_size: int, max_length: int,
                     pack: str = "documents", seed: int = 0, eval_batch_size: int | None = None,
                     shard_index: int | None = None, shard_count: int | None = None, path: str = "",
                     data_dir: str | None = None, prefetch: int = 2, num_epochs: int | None = None) -> LMDatasets:
  """The training iterator and eval accessors of one document dataset, for this host.

  Each host reads and tokenizes only its documents shard_index, shard_index + shard_count, ... of each split
  (`DocumentSource.shard`), then shuffles, packs and batches them on its own (`lm_train_dataset`). The global
  batch of step s is the concatenation of every host's batch s, so the data order is a function of (seed,
  shard_count): a checkpoint's iterator positions resume only with the same number of hosts.

  Args:
    dataset, path, data_dir: which documents (see `sources.load_split`): "text", "lm1b", "wiki40b/en", ...
    tokenizer: the vocabulary (`tokenizer.get_tokenizer`).
    batch_size: training rows per batch on this host.
    max_length: tokens per training row, and the default of eval rows.
    pack: "documents" or "stream" (see the module docstring).
    seed: shuffle seed.
    eval_batch_size: eval rows per batch on this host; default batch_size.
    shard_index, shard_count: this host's slice; default `jax.process_index()`, `jax.process_count()`.
    prefetch: training batches built ahead in a background thread; 0 = none.
    num_epochs: training passes; None = forever.
  """
  if pack not in PACKS:
    raise ValueError(f"data.pack={pack!r}; use one of {PACKS}.")
  splits = document_splits(dataset, tokenizer, path=path, data_dir=data_dir, max_length=max_length,
                           eval_batch_size=eval_batch_size or batch_size, shard_index=shard_index,
                           shard_count=shard_count)
  train_documents = training_documents(splits)
  train = iter(lm_train_dataset(train_documents, batch_size=batch_size, max_length=max_length, pack=pack,
                                seed=seed, num_epochs=num_epochs, prefetch=prefetch))
  return LMDatasets(train=train, train_documents=train_documents, eval_batches=splits.eval_batches,
                    split_bytes=splits.split_bytes, documents=splits.documents, pack=pack, max_length=max_length,
                    shard_index=splits.shard_index, shard_count=splits.shard_count, split_sizes=splits.split_sizes)


def document_splits(dataset: str, tokenizer: Tokenizer, *, shard_index: int | None, shard_count: int | None,
                    **kwargs) -> DocumentSplits:
  """`DocumentSplits` of this host: `shard_index`, `shard_count` default to `jax.process_index()`,
  `jax.process_count()`."""
  return DocumentSplits(dataset, tokenizer, shard_index=jax.process_index() if shard_index is None else shard_index,
                        shard_count=jax.process_count() if shard_count is None else shard_count, **kwargs)


def training_documents(splits: DocumentSplits) -> TokenizedDocuments:
  """This host's tokenized training documents of `splits`; refuses a host without any."""
  documents = splits.tokenized("train")
  if not len(documents):
    raise ValueError(f"host {splits.shard_index} of {splits.shard_count} has no training documents (the split has "
                     f"{splits.split_sizes['train']}); use fewer hosts or more documents.")
  return documents
