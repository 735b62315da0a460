"""What the hosts of a multi-host run agree on before they read: the largest of their counts."""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils


def largest_over_hosts(count: int | np.ndarray, shard_count: int, what: str) -> int | np.ndarray:
  """The largest of the `shard_count` hosts' `count`s, elementwise for int arrays (every host calls this at the same
  point): `count` with one host, gathered from every process (`multihost_utils.process_allgather`) when each host is
  a process; `what` (e.g. "eval batches") names the batches the count is for in the error of simulated hosts."""
  if shard_count == 1:
    return count
  if jax.process_count() != shard_count:
    raise ValueError(f"{what} of shard_count={shard_count} hosts need one process per host (there are "
                     f"{jax.process_count()}): each host's count is gathered so that all hosts make the same "
                     "batches.")
  return np.max(multihost_utils.process_allgather(np.asarray(count, np.int64)), axis=0)
