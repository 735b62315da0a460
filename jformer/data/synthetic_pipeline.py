"""grain input pipelines of the synthetic tasks: generated rows (`synthetic/dataset.py`) -> per-host batches.

A batch is a dict of int32 numpy arrays `[rows, L]` with the keys `ROW_KEYS` (`targets`, `targets_segmentation`,
`targets_position` as a language model's batch, and `targets_weights`: 1 at the answer positions, the loss
weights). L is the task's sequence length (`Sizes.seq_len`), the same for every row; nothing is packed.

Each host (`shard_index` of `shard_count`) generates only its examples shard_index::shard_count of each split. The
training iterator walks the train split's examples in order (they are independent draws: no shuffle is needed) and
is a grain `DatasetIterator` whose state is its position (`get_state()`/`set_state()` resume it exactly, with the
same number of hosts). Eval batches hold every example of the valid or test split once, generated on first use and
kept; every host gets the same number of batches, all-zero rows (no weight) filling the end.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import grain
import jax
import numpy as np

from jformer.data import sources
from jformer.data.pipeline import batched
from jformer.data.synthetic.common import Sizes
from jformer.data.synthetic.dataset import ROW_KEYS, SyntheticSource


@dataclasses.dataclass
class SyntheticDatasets:
  """What `make_synthetic_datasets` returns.

  Attributes:
    train: this host's checkpointable training iterator (`next()` -> batch; `get_state()`/`set_state()`).
    eval_batches: `eval_batches(split="valid")` -> a finite list of this host's batches of `split`.
    sizes: the task's `Sizes(seq_len, vocab_size)`.
    dataset, options, seed: what the rows are generated from.
    shard_index, shard_count: this host and the number of hosts that share the data.
  """
  train: grain.DatasetIterator
  eval_batches: Callable[..., list[dict[str, np.ndarray]]]
  sizes: Sizes
  dataset: str
  options: dict[str, Any]
  seed: int = 0
  shard_index: int = 0
  shard_count: int = 1

  def describe(self, max_length: int) -> str:
    """One line on the data, e.g. "data: synthetic 'mqar' {...}, seed 0: rows of 64 tokens, 67 token ids"."""
    del max_length  # every row has the task's length.
    line = (f"data: synthetic '{self.dataset}' {self.options}, seed {self.seed}: rows of {self.sizes.seq_len} "
            f"tokens, {self.sizes.vocab_size} token ids; loss and accuracy on the answer positions only")
    return line + (f", host {self.shard_index} of {self.shard_count}" if self.shard_count > 1 else "")


def eval_rows(source: SyntheticSource, rows: int, length: int) -> dict[str, np.ndarray]:
  """The rows of `source` stacked (`ROW_KEYS` -> int32 [rows, length]), all-zero rows after its `len(source)`."""
  stacked = {key: np.zeros((rows, length), np.int32) for key in ROW_KEYS}
  for i in range(len(source)):
    example = source[i]
    for key in ROW_KEYS:
      stacked[key][i] = example[key]
  return stacked


def make_synthetic_datasets(*, dataset: str, options: Mapping[str, Any], batch_size: int, seed: int = 0,
                            eval_batch_size: int | None = None, shard_index: int | None = None,
                            shard_count: int | None = None, prefetch: int = 2) -> SyntheticDatasets:
  """The training iterator and eval batches of synthetic dataset `dataset` (a registered `SyntheticDataset`) for
  this host.

  Args:
    dataset: "mqar", "induction", "selective_copy" or "listops".
    options: `data.dataset_options` (the generator's options, `eval_examples`).
    batch_size: training rows per batch on this host.
    seed: the dataset's seed (`synthetic.dataset.split_seed` gives each split its own).
    eval_batch_size: eval rows per batch on this host; default batch_size.
    shard_index, shard_count: this host's slice; default `jax.process_index()`, `jax.process_count()`.
    prefetch: training batches built ahead in a background thread; 0 = none.
  """
  entry = sources.synthetic_entry(dataset)
  if entry is None:
    raise ValueError(f"dataset '{dataset}' is not a synthetic task; model.architecture='synthetic' trains on one of "
                     "'mqar', 'induction', 'selective_copy', 'listops' (or use model.architecture='lm').")
  shard_index = jax.process_index() if shard_index is None else shard_index
  shard_count = jax.process_count() if shard_count is None else shard_count
  options = dict(options)

  def load(split: str) -> SyntheticSource:
    return sources.load_split(dataset, split, seed=seed, options=options)

  rows = grain.MapDataset.source(load("train").shard(shard_index, shard_count))
  train = iter(batched(rows.to_iter_dataset(grain.ReadOptions(num_threads=0)), batch_size=batch_size,
                       drop_remainder=True, prefetch=prefetch))
  sizes = entry.sizes(options)
  cached: dict[str, dict[str, np.ndarray]] = {}
  eval_rows_per_batch = eval_batch_size or batch_size

  def eval_batches(split: str = "valid") -> list[dict[str, np.ndarray]]:
    if split not in cached:
      source = load(split)
      per_host = -(-len(source) // shard_count)  # the largest host's examples: every host makes as many batches.
      num_rows = -(-per_host // eval_rows_per_batch) * eval_rows_per_batch
      cached[split] = eval_rows(source.shard(shard_index, shard_count), num_rows, sizes.seq_len)
    stacked = cached[split]
    return [{key: value[start:start + eval_rows_per_batch] for key, value in stacked.items()}
            for start in range(0, len(stacked["targets"]), eval_rows_per_batch)]

  return SyntheticDatasets(train=train, eval_batches=eval_batches, sizes=sizes, dataset=dataset,
                           options=options, seed=seed, shard_index=shard_index, shard_count=shard_count)
