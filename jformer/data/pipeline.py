"""grain input pipelines: tokenized pairs -> shuffled, packed, padded or token-budget (bucketed), per-host batches.

A batch is a dict of int32 numpy arrays, each `[batch, max_length]` (language-modelling batches, `lm_pipeline`,
have the "targets" keys only: `batch_keys(("targets",))`):
  inputs, targets                              token ids, 0 = padding; each example ends with EOS (1).
  inputs_segmentation, targets_segmentation    1, 2, 3... = which packed example of the row a token belongs to,
                                               0 = padding (un-packed rows: 1 on tokens).
  inputs_position, targets_position            position of the token within its own example, 0 at padding.

Each host (`shard_index` of `shard_count`) reads and tokenizes only its disjoint, strided slice of a split, once,
and keeps it in memory as ragged int32 arrays (`TokenizedPairs`). The training iterator is a grain
`DatasetIterator` whose batches are built ahead in a background thread: `get_state()`/`set_state()` resume it
exactly (with the same number of hosts).

Token-budget batching (`batch_tokens`, `token_budget_dataset`) replaces the fixed `[batch, max_length]` shape of
training batches by one of a few `[rows, length]` shapes, one per length bucket (`jformer.data.buckets`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Callable, Iterable, Sequence

import grain
import jax
import numpy as np
from absl import logging

from jformer.data import sources
from jformer.data.buckets import TokenBudgetPlan
from jformer.data.hosts import largest_over_hosts
from jformer.data.tokenizer import Tokenizer
from jformer.ops.tokens import EOS_ID

FEATURES = ("inputs", "targets")


def batch_keys(features: tuple[str, ...]) -> tuple[str, ...]:
  """The keys of a batch of `features`: each feature's tokens, `_segmentation` and `_position`."""
  return tuple(f"{f}{suffix}" for f in features for suffix in ("", "_segmentation", "_position"))


BATCH_KEYS = batch_keys(FEATURES)
LONG_EXAMPLES = ("drop", "truncate")
_ENCODE_CHUNK = 8192  # Pairs per `encode_batch` call.


@dataclasses.dataclass(frozen=True)
class TokenizedPairs:
  """The token ids of a split, ragged: example i's inputs are `inputs[inputs_offsets[i]:inputs_offsets[i + 1]]`.

  Attributes:
    inputs, targets: flat int32 token ids of all examples.
    inputs_offsets, targets_offsets: int64 `[num_examples + 1]` example boundaries.
    dropped: pairs left out for being longer than max_length.
    truncated: pairs cut to max_length.
    texts: `{"inputs": [str], "targets": [str]}` of the examples, kept for subword sampling (`tokenize_pairs`'s
      `keep_texts`); None otherwise.
  """
  inputs: np.ndarray
  inputs_offsets: np.ndarray
  targets: np.ndarray
  targets_offsets: np.ndarray
  dropped: int = 0
  truncated: int = 0
  texts: dict[str, list[str]] | None = None

  def __len__(self) -> int:
    return len(self.inputs_offsets) - 1

  def __getitem__(self, index: int) -> dict[str, np.ndarray]:
    """`{"inputs": int32[n], "targets": int32[m]}` of example `index`."""
    i = index.__index__()
    return {"inputs": self.inputs[self.inputs_offsets[i]:self.inputs_offsets[i + 1]],
            "targets": self.targets[self.targets_offsets[i]:self.targets_offsets[i + 1]]}

  def num_tokens(self) -> int:
    """Total tokens, inputs and targets."""
    return len(self.inputs) + len(self.targets)


def ragged(rows: Iterable[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
  """Flat int32 values and int64 `[len(rows) + 1]` offsets of `rows`."""
  rows = list(rows)
  offsets = np.zeros(len(rows) + 1, np.int64)
  np.cumsum([len(r) for r in rows], out=offsets[1:])
  return np.fromiter(itertools.chain.from_iterable(rows), np.int32, count=offsets[-1]), offsets


def _fit(ids: list[int], max_length: int) -> list[int]:
  """`ids` cut to `max_length` tokens, still ending with EOS."""
  return ids if len(ids) <= max_length else ids[:max_length - 1] + [EOS_ID]


def tokenize_pairs(source: Iterable[dict[str, str]], tokenizer: Tokenizer, *, max_length: int,
                   long_examples: str = "drop", name: str = "", keep_texts: bool = False) -> TokenizedPairs:
  """Tokenizes every pair of `source`; pairs with a side longer than `max_length` are dropped or truncated.

  Args:
    source: `{"inputs": str, "targets": str}` pairs (e.g. a `sources.TextPairSource`).
    tokenizer: the shared vocabulary.
    max_length: most tokens (EOS included) per side.
    long_examples: "drop" or "truncate" (keep the first max_length - 1 tokens and EOS).
    name: split name for the log line that counts dropped/truncated pairs.
    keep_texts: keep the texts of the kept pairs (`TokenizedPairs.texts`), which subword sampling segments anew.
  """
  if long_examples not in LONG_EXAMPLES:
    raise ValueError(f"long_examples={long_examples!r}; use one of {LONG_EXAMPLES}")
  if max_length < 2:
    raise ValueError(f"max_length={max_length} leaves no room for a token and EOS; use max_length >= 2.")
  kept = {f: [] for f in FEATURES}
  texts = {f: [] for f in FEATURES} if keep_texts else None
  total = long = 0
  # A tokenizer with a target side of its own (Marian's) cuts the targets with it; the others cut both sides alike.
  encoders = (tokenizer.encode_batch, getattr(tokenizer, "encode_targets_batch", tokenizer.encode_batch))
  it = iter(source)
  while chunk := list(itertools.islice(it, _ENCODE_CHUNK)):
    encoded = [encode([pair[f] for pair in chunk]) for f, encode in zip(FEATURES, encoders)]
    for pair, *ids in zip(chunk, *encoded):
      total += 1
      if max(map(len, ids)) > max_length:
        long += 1
        if long_examples == "drop":
          continue
      for f, seq in zip(FEATURES, ids):
        kept[f].append(_fit(seq, max_length))
        if texts is not None:
          texts[f].append(pair[f])
  if long:
    logging.info("%s: %s %d of %d pairs longer than max_length=%d.", name or "tokenize",
                 "dropped" if long_examples == "drop" else "truncated", long, total, max_length)
  (inputs, inputs_offsets), (targets, targets_offsets) = (ragged(kept[f]) for f in FEATURES)
  return TokenizedPairs(inputs, inputs_offsets, targets, targets_offsets,
                        dropped=long if long_examples == "drop" else 0,
                        truncated=long if long_examples == "truncate" else 0, texts=texts)


def pad_example(example: dict[str, np.ndarray], max_length: int,
                features: tuple[str, ...] = FEATURES) -> dict[str, np.ndarray]:
  """One un-packed row of `example`'s `features`: the keys `batch_keys(features)`, each int32 `[max_length]`."""
  row = {key: np.zeros(max_length, np.int32) for key in batch_keys(features)}
  for f in features:
    n = len(example[f])
    row[f][:n] = example[f]
    row[f"{f}_segmentation"][:n] = 1
    row[f"{f}_position"][:n] = np.arange(n)
  return row


def rename_packed(row: dict[str, np.ndarray], features: tuple[str, ...] = FEATURES) -> dict[str, np.ndarray]:
  """grain's packed keys (`<f>_segment_ids`, `<f>_positions`) -> ours (`<f>_segmentation`, `<f>_position`)."""
  return {key: row[key.replace("_segmentation", "_segment_ids").replace("_position", "_positions")]
          for key in batch_keys(features)}


def pack_and_batch(examples: grain.IterDataset, *, features: tuple[str, ...], batch_size: int, max_length: int,
                   packing: bool, seed: int, drop_remainder: bool, prefetch: int) -> grain.IterDataset:
  """Rows of `examples` (dicts of `features` -> int32 `[<= max_length]`), packed (grain's first fit over
  `batch_size` rows at a time; segment ids and positions restart per example) or padded one per row, then batched
  (`batched`)."""
  if packing:
    rows = grain.experimental.FirstFitPackIterDataset(
        examples, length_struct={f: max_length for f in features}, num_packing_bins=batch_size, seed=seed,
        shuffle_bins=True).map(functools.partial(rename_packed, features=features))
  else:
    rows = examples.map(functools.partial(pad_example, max_length=max_length, features=features))
  return batched(rows, batch_size=batch_size, drop_remainder=drop_remainder, prefetch=prefetch)


def batched(rows: grain.IterDataset, *, batch_size: int, drop_remainder: bool, prefetch: int) -> grain.IterDataset:
  """Batches of `batch_size` rows, built `prefetch` batches ahead in a background thread (grain's
  `ThreadPrefetchIterDataset`; 0 = none)."""
  return prefetched(rows.batch(batch_size, drop_remainder=drop_remainder), prefetch)


def prefetched(ds: grain.IterDataset, prefetch: int) -> grain.IterDataset:
  """`ds` built `prefetch` elements ahead in a background thread (grain's `ThreadPrefetchIterDataset`; 0 = none)."""
  return grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=prefetch) if prefetch else ds


@dataclasses.dataclass(frozen=True)
class SubwordSampling:
  """Subword regularisation at training time (Kudo 2018): each time a training pair is read, both sides are
  segmented anew, each drawn from its `nbest` most probable segmentations with probability proportional to
  P(x)^alpha (`Tokenizer.sample`). The draw depends only on the data seed and the pair's position in the stream
  (grain's `random_map`), so a resumed run reads the same segmentations; evaluation and decoding never sample.
  A draw longer than max_length (sampled segmentations have more pieces) falls back to the pair's best one."""
  tokenizer: Tokenizer
  alpha: float
  nbest: int

  def segment(self, pairs: TokenizedPairs, max_length: int, index: int, rng: np.random.Generator
              ) -> dict[str, np.ndarray]:
    """`{"inputs": int32[n], "targets": int32[m]}`: pair `index` of `pairs` (kept with its texts) segmented anew."""
    drawn = {f: self.tokenizer.sample(pairs.texts[f][index], rng, alpha=self.alpha, nbest=self.nbest)
             for f in FEATURES}
    if max(map(len, drawn.values())) > max_length:
      return pairs[index]
    return {f: np.asarray(ids, np.int32) for f, ids in drawn.items()}


def require_examples(pairs: TokenizedPairs, max_length: int) -> None:
  """Refuses a host without training examples, saying how many were dropped."""
  if not len(pairs):
    raise ValueError(f"no training examples ({pairs.dropped} dropped as longer than max_length={max_length}); "
                     "raise max_length, use long_examples='truncate' or, with several hosts, use fewer hosts.")


def train_dataset(pairs: TokenizedPairs, *, batch_size: int, max_length: int, packing: bool = True, seed: int = 0,
                  num_epochs: int | None = None, drop_remainder: bool = True, prefetch: int = 0,
                  sampling: SubwordSampling | None = None) -> grain.IterDataset:
  """Training batches of one host from its pairs: shuffled (differently each epoch), packed or padded.

  Args:
    pairs: this host's tokenized training examples (every side at most `max_length` tokens).
    batch_size: rows per batch on this host.
    max_length: tokens per row.
    packing: pack several examples per row (greedy first-fit over `batch_size` rows at a time); else one per row.
    seed: shuffle (and packed-row order) seed.
    num_epochs: passes over the data; None = forever.
    drop_remainder: drop the last partial batch of a finite run (else it has fewer rows).
    prefetch: batches built ahead in a background thread (grain's `ThreadPrefetchIterDataset`); 0 = none.
    sampling: segment each pair anew every time it is read (`SubwordSampling`; `pairs` must hold their texts),
      in the same order as without; None = the tokenized pairs as they are.

  Returns:
    An IterDataset of batches (dicts of int32 `[batch_size, max_length]`, keys `BATCH_KEYS`); `iter()` of it is
    a checkpointable `grain.DatasetIterator` (with prefetch, its state is that of the last batch returned).
  """
  require_examples(pairs, max_length)
  if sampling is None:
    examples = grain.MapDataset.source(pairs).shuffle(seed).repeat(num_epochs)
  else:
    if pairs.texts is None:
      raise ValueError("subword sampling segments the pairs' texts anew: tokenize them with keep_texts=True")
    # range(n).shuffle(seed) permutes the indices as source(pairs).shuffle(seed) does: the same order.
    examples = grain.MapDataset.range(len(pairs)).shuffle(seed).repeat(num_epochs).random_map(
        functools.partial(sampling.segment, pairs, max_length), seed=seed)
  examples = examples.to_iter_dataset(grain.ReadOptions(num_threads=0))
  return pack_and_batch(examples, features=FEATURES, batch_size=batch_size, max_length=max_length, packing=packing,
                        seed=seed, drop_remainder=drop_remainder, prefetch=prefetch)


def token_budget_plan(pairs: TokenizedPairs, *, batch_tokens: int, max_length: int, row_multiple: int = 1,
                      shard_count: int = 1, seed: int = 0) -> TokenBudgetPlan:
  """The batches of `pairs` (this host's) under a budget of `batch_tokens` per step over all hosts
  (`buckets.TokenBudgetPlan`), with the number of batches of each bucket agreed by the hosts (`largest_over_hosts`:
  with several hosts, every host calls this at the same point)."""
  require_examples(pairs, max_length)
  lengths = {f: np.diff(getattr(pairs, f"{f}_offsets")) for f in FEATURES}
  args = dict(batch_tokens=batch_tokens, max_length=max_length, row_multiple=row_multiple, shard_count=shard_count,
              seed=seed)
  own = TokenBudgetPlan(lengths["inputs"], lengths["targets"], **args)
  agreed = largest_over_hosts(own.own_batches, shard_count, "token-budget batches")
  return TokenBudgetPlan(lengths["inputs"], lengths["targets"], batches_per_bucket=agreed, **args)


def token_budget_dataset(pairs: TokenizedPairs, plan: TokenBudgetPlan, *, num_epochs: int | None = None,
                         prefetch: int = 0) -> grain.IterDataset:
  """Training batches of one host under a token budget: batch i is `plan.batch(i)`'s examples, one per row, padded
  to the bucket length; empty rows (segmentation 0, no loss weight) complete a bucket's last batch.

  Returns:
    An IterDataset of batches (dicts of int32 `[rows, length]`, keys `BATCH_KEYS`, (rows, length) one of
    `plan.shapes()`), `plan.batches_per_epoch` per epoch; `iter()` of it is a checkpointable
    `grain.DatasetIterator` (its state: the batch index).
  """
  empty = {f: np.zeros(0, np.int32) for f in FEATURES}

  def batch(index: int, _) -> dict[str, np.ndarray]:
    examples, rows, length = plan.batch(index)
    padded = [pad_example(pairs[i], length) for i in examples] + [pad_example(empty, length)] * (rows - len(examples))
    return {key: np.stack([row[key] for row in padded]) for key in BATCH_KEYS}

  indices = grain.MapDataset.range(plan.batches_per_epoch).repeat(num_epochs)
  return prefetched(indices.map_with_index(batch).to_iter_dataset(grain.ReadOptions(num_threads=0)), prefetch)


def real_tokens(batches: Iterable[dict[str, np.ndarray]]) -> dict[str, float]:
  """Mean real (non-padding) tokens per batch of `batches`, per feature: `{"inputs": ..., "targets": ...}`."""
  counts = [{f: int((b[f"{f}_segmentation"] != 0).sum()) for f in FEATURES} for b in batches]
  return {f: float(np.mean([c[f] for c in counts])) for f in FEATURES}


def eval_dataset(pairs: TokenizedPairs, *, batch_size: int, max_length: int, min_examples: int = 0,
                 features: tuple[str, ...] = FEATURES) -> grain.MapDataset:
  """Eval batches of one host: each of its examples once, in order, un-packed; all-padding rows fill the end.

  Args:
    pairs: this host's tokenized examples (a sequence of dicts of `features` -> int32 `[<= max_length]`).
    batch_size, max_length: rows per batch, tokens per row.
    min_examples: rows before rounding up to whole batches, if more than `len(pairs)`: with several hosts, the
      largest host's example count, so that every host gets the same number of batches and a multi-host eval
      loop stays in step. Padding rows (segmentation 0 everywhere) carry no loss weight.

    features: the features of an example (translation: inputs and targets; language modelling: targets).

  Returns:
    A MapDataset of `ceil(max(len(pairs), min_examples) / batch_size)` batches (dicts of int32
    `[batch_size, max_length]`, keys `batch_keys(features)`).
  """
  examples = grain.MapDataset.source(pairs)
  num_batches = -(-max(len(pairs), min_examples) // batch_size)
  empty = {f: np.zeros(0, np.int32) for f in features}

  def row(index: int) -> dict[str, np.ndarray]:
    return pad_example(examples[index] if index < len(examples) else empty, max_length, features)

  return grain.MapDataset.range(num_batches * batch_size).map(row).batch(batch_size)


@dataclasses.dataclass
class Datasets:
  """What `make_datasets` returns.

  Attributes:
    train: this host's checkpointable training iterator (`next()` -> batch; `get_state()`/`set_state()`).
    train_pairs: this host's tokenized training examples (its shard of the split), e.g. for their token count.
    eval_batches: `eval_batches(split="valid")` -> a fresh finite iterable of padded batches of this host.
    raw_split: `raw_split(split="test")` -> (source strings, reference strings) of the whole split, for BLEU.
    shard_index, shard_count: this host and the number of hosts that share the data.
    split_sizes: pairs per split of the whole dataset (all hosts, before the length filter).
    tokens_per_step: mean real tokens per training batch of this host, `{"inputs": ..., "targets": ...}` (over
      the first batches of a fresh iterator, `real_tokens`).
    batch_shapes: the (rows, length) shapes of this host's training batches.
  """
  train: grain.DatasetIterator
  train_pairs: TokenizedPairs
  eval_batches: Callable[..., Iterable[dict[str, np.ndarray]]]
  raw_split: Callable[..., tuple[list[str], list[str]]]
  shard_index: int = 0
  shard_count: int = 1
  split_sizes: dict[str, int] = dataclasses.field(default_factory=dict)
  tokens_per_step: dict[str, float] = dataclasses.field(default_factory=dict)
  batch_shapes: list[tuple[int, int]] = dataclasses.field(default_factory=list)

  def describe(self, max_length: int) -> str:
    """One line on the training data of this host, e.g. 'data: 400 training pairs (12,345 tokens), 3 dropped as
    longer than 32 tokens; real tokens per step: 1,530 source, 1,702 target (batches [64, 32])' (with several
    hosts: '..., host 0 of 2 (800 pairs in the split); real tokens per step on this host: ...'; with a token
    budget, the batch shapes are '13 shapes [256, 8] ... [32, 64]')."""
    pairs = self.train_pairs
    line = (f"data: {len(pairs):,} training pairs ({pairs.num_tokens():,} tokens), {pairs.dropped:,} dropped as "
            f"longer than {max_length} tokens")
    if self.shard_count > 1:
      line += f", host {self.shard_index} of {self.shard_count} ({self.split_sizes['train']:,} pairs in the split)"
    if self.tokens_per_step:
      shapes = [f"[{rows}, {length}]" for rows, length in self.batch_shapes]
      shapes_text = shapes[0] if len(shapes) == 1 else f"{len(shapes)} shapes {shapes[0]} ... {shapes[-1]}"
      line += (f"; real tokens per step{' on this host' if self.shard_count > 1 else ''}: "
               f"{self.tokens_per_step['inputs']:,.0f} source, {self.tokens_per_step['targets']:,.0f} target "
               f"(batches {shapes_text})")
    return line


def make_datasets(*, dataset: str, tokenizer: Tokenizer, batch_size: int, max_length: int, path: str = "",
                  data_dir: str | None = None, packing: bool = True, long_examples: str = "drop", seed: int = 0,
                  num_epochs: int | None = None, eval_batch_size: int | None = None,
                  shard_index: int | None = None, shard_count: int | None = None, source_lang: str = "en",
                  target_lang: str = "de", prefetch: int = 2, batch_tokens: int = 0, row_multiple: int = 1,
                  measured_batches: int = 8, subword_sampling: float = 0.0, subword_nbest: int = 64) -> Datasets:
  """The training iterator and eval/test accessors of one dataset, for this host.

  Each host reads and tokenizes only its shard of the training and eval splits: pairs shard_index,
  shard_index + shard_count, ... (`TextPairSource.shard`), then shuffles, packs and batches them on its own
  (`train_dataset`). The global batch of step s is the concatenation of every host's batch s, so the data order
  is a function of (seed, shard_count): a checkpoint's iterator positions (one per host) resume only with the
  same number of hosts (`jformer.checkpoint` refuses another count, naming it).

  Args:
    dataset, path, data_dir, source_lang, target_lang: which data (see `sources.load_split`).
    tokenizer: the shared vocabulary (`tokenizer.get_tokenizer`).
    batch_size: training rows per batch on this host.
    max_length: tokens per row (training and eval).
    packing: pack training examples (see `train_dataset`).
    long_examples: "drop" or "truncate" training pairs longer than max_length (eval always truncates).
    seed: shuffle seed.
    num_epochs: training passes; None = forever.
    eval_batch_size: eval rows per batch on this host; default batch_size.
    shard_index, shard_count: this host's slice; default `jax.process_index()`, `jax.process_count()`.
    prefetch: training batches built ahead in a background thread; 0 = none.
    batch_tokens: > 0: training batches under this token budget per step over all hosts (`token_budget_dataset`,
      replacing `batch_size` and `packing`, which must be False); 0 = `batch_size` rows of `max_length`.
    row_multiple: with batch_tokens, rows per step over all hosts are a multiple of this (devices x gradient
      accumulation steps; a multiple of shard_count).
    measured_batches: the first batches of a fresh iterator whose real tokens `tokens_per_step` averages.
    subword_sampling: > 0: training pairs segmented anew each time they are read, drawn from their
      `subword_nbest` best segmentations with this alpha (`SubwordSampling`); 0 = off. Not with batch_tokens.
  """
  if batch_tokens and subword_sampling:
    raise ValueError(f"subword_sampling={subword_sampling} changes the pairs' lengths, which "
                     f"batch_tokens={batch_tokens} plans its batches by; use one of them (batch_tokens=0 packs rows)")
  if batch_tokens and packing:
    raise ValueError(f"batch_tokens={batch_tokens} and packing=True both decide how training rows are filled; "
                     "use packing=False with batch_tokens, or batch_tokens=0 to pack.")
  shard_index = jax.process_index() if shard_index is None else shard_index
  shard_count = jax.process_count() if shard_count is None else shard_count
  split_sizes: dict[str, int] = {}

  def load(split: str) -> sources.TextPairSource:
    source = sources.load_split(dataset, split, path=path, data_dir=data_dir, source_lang=source_lang,
                                target_lang=target_lang)
    if not isinstance(source, sources.TextPairSource):
      raise ValueError(f"dataset '{dataset}' holds documents, not translation pairs; train a language model on it "
                       "(model.architecture='lm'), or give a translation dataset such as 'parallel_text'.")
    split_sizes[split] = len(source)
    return source

  train_pairs = tokenize_pairs(load("train").shard(shard_index, shard_count), tokenizer, max_length=max_length,
                               long_examples=long_examples, name=f"{dataset}/train[{shard_index}::{shard_count}]",
                               keep_texts=subword_sampling > 0)
  if batch_tokens:
    plan = token_budget_plan(train_pairs, batch_tokens=batch_tokens, max_length=max_length, row_multiple=row_multiple,
                             shard_count=shard_count, seed=seed)
    batch_shapes = plan.shapes()
    train_ds = functools.partial(token_budget_dataset, train_pairs, plan, num_epochs=num_epochs)
  else:
    batch_shapes = [(batch_size, max_length)]
    sampling = SubwordSampling(tokenizer, subword_sampling, subword_nbest) if subword_sampling else None
    train_ds = functools.partial(train_dataset, train_pairs, batch_size=batch_size, max_length=max_length,
                                 packing=packing, seed=seed, num_epochs=num_epochs, sampling=sampling)
  train = iter(train_ds(prefetch=prefetch))
  tokens_per_step = real_tokens(itertools.islice(iter(train_ds()), measured_batches))
  eval_pairs: dict[str, TokenizedPairs] = {}

  def eval_batches(split: str = "valid") -> grain.MapDataset:
    if split not in eval_pairs:
      eval_pairs[split] = tokenize_pairs(load(split).shard(shard_index, shard_count), tokenizer,
                                         max_length=max_length, long_examples="truncate",
                                         name=f"{dataset}/{split}[{shard_index}::{shard_count}]")
    return eval_dataset(eval_pairs[split], batch_size=eval_batch_size or batch_size, max_length=max_length,
                        min_examples=-(-split_sizes[split] // shard_count))

  def raw_split(split: str = "test") -> tuple[list[str], list[str]]:
    pairs = list(load(split))
    return [p["inputs"] for p in pairs], [p["targets"] for p in pairs]

  return Datasets(train=train, train_pairs=train_pairs, eval_batches=eval_batches, raw_split=raw_split,
                  shard_index=shard_index, shard_count=shard_count, split_sizes=split_sizes,
                  tokens_per_step=tokens_per_step, batch_shapes=batch_shapes)
