"""Token-budget batching (fairseq's `--max-tokens`, tensor2tensor's length buckets): the plan of which examples
form each training batch, in numpy; `pipeline.token_budget_dataset` turns it into a grain dataset.

The budget rule. An example's length is max(source tokens, target tokens), EOS included; it goes to the shortest
bucket length L >= it (`bucket_lengths`: 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, ... up to max_length, four per
doubling). A batch of bucket L has R_L = floor(N / (L * m)) * m rows over all hosts (N = batch_tokens, m = the
row multiple that the devices and gradient accumulation need) and shape `[R_L, L]` on every side, so R_L * L <= N:
a batch holds at most N source tokens and at most N target tokens (fairseq's max(src, tgt) x rows <= N, with the
bucket length in place of the batch's longest example). Each host gets R_L / shard_count rows of it.

The schedule. Every epoch, each host shuffles its examples (seeded by (seed, epoch)) and cuts each bucket into
batches in that order; the last batch of a bucket is completed with empty rows (no example is dropped: every
example is in exactly one batch per epoch). The hosts agree on the number of batches of each bucket: the largest
over hosts (`largest_over_hosts`; a host with fewer examples there fills its extra batches with empty rows). The
order of the batches, i.e. which bucket each step of the epoch uses, is a permutation drawn from (seed, epoch)
only, so every host builds a batch of the same shape at the same step, as jit over a global mesh needs.
"""

from __future__ import annotations

import functools

import numpy as np

BUCKETS_PER_DOUBLING = 4
SHORTEST_BUCKET = 8


def bucket_lengths(max_length: int) -> np.ndarray:
  """int64 bucket lengths: from 8 in steps of L/4 rounded down to a power of two (8, 10, 12, 14, 16, 20, 24, ...),
  then max_length; each length a bucket's row length."""
  lengths, length = [], min(SHORTEST_BUCKET, max_length)
  while length < max_length:
    lengths.append(length)
    length += max(1, 2 ** int(np.log2(length)) // BUCKETS_PER_DOUBLING)
  return np.asarray(lengths + [max_length], np.int64)


def bucket_rows(batch_tokens: int, lengths: np.ndarray, row_multiple: int) -> np.ndarray:
  """int64 rows per batch of each bucket over all hosts: floor(batch_tokens / (length * row_multiple)) *
  row_multiple, so rows x length <= batch_tokens; refuses a budget with no row for the longest bucket."""
  rows = batch_tokens // (lengths * row_multiple) * row_multiple
  if not rows[-1]:
    raise ValueError(f"data.batch_tokens={batch_tokens} holds no {row_multiple} rows (the row multiple of the devices "
                     f"and gradient accumulation) of data.max_length={lengths[-1]} tokens; raise data.batch_tokens to "
                     f"at least {row_multiple * lengths[-1]} or lower data.max_length.")
  return rows


class TokenBudgetPlan:
  """Which of this host's examples form each training batch, and its shape (see the module docstring).

  Args:
    input_lengths, target_lengths: int `[num_examples]` tokens per side of this host's examples (each <= max_length).
    batch_tokens: the budget N of one step, over all hosts.
    max_length: the longest bucket.
    row_multiple: rows per batch over all hosts are a multiple of this (a multiple of shard_count).
    shard_count: hosts sharing the step; each host's batch has rows / shard_count rows.
    seed: seed of the example and batch order (combined with the epoch).
    batches_per_bucket: int `[num_buckets]` batches of each bucket per epoch, agreed by all hosts (at least this
      host's `own_batches`); None = this host's own (one host).

  Attributes:
    lengths, rows: int64 `[num_buckets]` bucket lengths and this host's rows per batch of each.
    bucket: int64 `[num_examples]` each example's bucket.
    own_batches: int64 `[num_buckets]` batches each bucket of this host fills: ceil(examples / rows).
    batches_per_bucket, batches_per_epoch: the agreed batches per bucket and their sum.
  """

  def __init__(self, input_lengths: np.ndarray, target_lengths: np.ndarray, *, batch_tokens: int, max_length: int,
               row_multiple: int = 1, shard_count: int = 1, seed: int = 0,
               batches_per_bucket: np.ndarray | None = None):
    if row_multiple % shard_count:
      raise ValueError(f"row_multiple={row_multiple} is not a multiple of shard_count={shard_count}")
    self.lengths = bucket_lengths(max_length)
    self.rows = bucket_rows(batch_tokens, self.lengths, row_multiple) // shard_count
    self.bucket = np.searchsorted(self.lengths, np.maximum(input_lengths, target_lengths))
    counts = np.bincount(self.bucket, minlength=len(self.lengths))
    self.own_batches = -(-counts // self.rows)
    self.batches_per_bucket = self.own_batches if batches_per_bucket is None else np.asarray(batches_per_bucket)
    if (self.batches_per_bucket < self.own_batches).any():
      raise ValueError(f"batches_per_bucket={self.batches_per_bucket.tolist()} leaves out examples of this host "
                       f"(it needs {self.own_batches.tolist()}); give the largest over hosts.")
    self.batches_per_epoch = int(self.batches_per_bucket.sum())
    self.seed = seed
    self.epoch_plan = functools.lru_cache(maxsize=2)(self._epoch_plan)

  def shapes(self) -> list[tuple[int, int]]:
    """The (rows, length) of this host's batches, one per bucket that has batches: the only shapes it makes."""
    return [(int(r), int(n)) for r, n, b in zip(self.rows, self.lengths, self.batches_per_bucket) if b]

  def _epoch_plan(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Epoch `epoch`'s (bucket of each batch, the batch's rank within its bucket, this host's examples grouped by
    bucket in shuffled order, where each bucket's examples start in that array)."""
    rng = np.random.default_rng([self.seed, epoch])
    schedule = rng.permutation(np.repeat(np.arange(len(self.lengths)), self.batches_per_bucket))
    rank = np.empty(len(schedule), np.int64)
    for b in np.unique(schedule):
      where = np.flatnonzero(schedule == b)
      rank[where] = np.arange(len(where))
    shuffled = rng.permutation(len(self.bucket))
    order = shuffled[np.argsort(self.bucket[shuffled], kind="stable")]
    starts = np.searchsorted(self.bucket[order], np.arange(len(self.lengths)))
    return schedule, rank, order, starts

  def batch(self, index: int) -> tuple[np.ndarray, int, int]:
    """Batch `index` of the stream of all epochs: (this host's example indices in it, rows, length); the indices
    are at most `rows` (fewer in a bucket's last batch, none in a batch only other hosts fill)."""
    epoch, k = divmod(index, self.batches_per_epoch)
    schedule, rank, order, starts = self.epoch_plan(epoch)
    b = schedule[k]
    end = starts[b + 1] if b + 1 < len(starts) else len(order)
    first = starts[b] + rank[k] * self.rows[b]
    return order[first:min(first + self.rows[b], end)], int(self.rows[b]), int(self.lengths[b])
