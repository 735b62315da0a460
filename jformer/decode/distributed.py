"""Data-parallel decoding: the rows of a batch split across every device of every host, gathered back in order.

The decoders are row-wise: output row i depends only on input row i (the search loops run until every row has
finished, and a row that finished early no longer changes). So a batch can be cut into equal shares, one per
device, each decoded by the unchanged single-device code (`jax.shard_map` of the decoder over a 1-D mesh, no
collective inside, so each device stops as soon as its own rows are done), and the shares put back together:
the outputs equal one device decoding the whole batch, up to the backend's rounding for a smaller batch (bitwise
equal on CPU, tests/test_decode_distributed.py).

Multi-host (SPMD): every process holds the same global batch as numpy, makes the same calls in the same order,
and gets the whole output back as numpy (`process_allgather`): process 0 writes results, the others may too.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

ROWS_AXIS = "rows"


class RowParallel:
  """Runs a row-wise function with its rows split across `devices` (default: all devices of all processes).

    parallel = RowParallel()
    decode = parallel.map_rows(fn)  # fn(shared, rows, **static) -> outputs; rows and outputs [b, ...] per device
    out = parallel.gather(decode(parallel.replicate(shared), parallel.shard_rows(rows), **static))

  `shared` is any pytree every device gets whole (parameters, a PRNG key); `rows` is a pytree of arrays whose
  leading dimension (a multiple of `size`, see `padded_rows`) is split in contiguous shares, device k taking
  rows `k * b ... (k + 1) * b - 1` with b = rows / size.
  """

  def __init__(self, devices: Sequence[jax.Device] | None = None):
    self.devices = list(jax.devices() if devices is None else devices)
    if not self.devices:
      raise ValueError("RowParallel needs at least one device")
    mesh = Mesh(np.asarray(self.devices), (ROWS_AXIS,))
    self.mesh = mesh
    self._replicated = NamedSharding(mesh, PartitionSpec())
    self._rows = NamedSharding(mesh, PartitionSpec(ROWS_AXIS))

  @property
  def size(self) -> int:
    """Number of devices the rows are split across."""
    return len(self.devices)

  def padded_rows(self, rows: int) -> int:
    """`rows` rounded up to a multiple of `size` (at least `size`): the batch to build, padding rows included."""
    return max(1, -(-rows // self.size)) * self.size

  def replicate(self, tree):
    """Every array leaf of `tree` (numpy or jax, the same value on every process) copied whole to every device."""
    return jax.tree.map(lambda x: _global_array(np.asarray(x), self._replicated), tree)

  def shard_rows(self, tree):
    """Every leaf of `tree`, numpy `[rows, ...]` (the whole batch, the same on every process), split by rows."""
    def put(x):
      x = np.asarray(x)
      if x.ndim == 0 or x.shape[0] % self.size:
        raise ValueError(f"a batch of shape {x.shape} cannot be split in equal shares across {self.size} devices; "
                         "pad it to RowParallel.padded_rows(rows) rows")
      return _global_array(x, self._rows)
    return jax.tree.map(put, tree)

  def map_rows(self, fn: Callable) -> Callable:
    """`fn(shared, rows, **static) -> outputs`, jit-able with hashable `static`, as a jitted function of
    (`replicate`d shared, `shard_rows` rows, **static) whose outputs stay split by rows (see `gather`).

    Each device calls `fn` on its own share of the rows: `fn` must be row-wise and free of collectives.
    """
    compiled = {}

    def run(shared, rows, **static):
      key = tuple(sorted(static.items()))
      if key not in compiled:
        # check_vma=False: the decoders' while loops start from constants (replicated) that become per-device
        # values; with the check on, jax would ask every decoder to mark its initial carry as varying.
        local = jax.shard_map(functools.partial(fn, **static), mesh=self.mesh, check_vma=False,
                              in_specs=(PartitionSpec(), PartitionSpec(ROWS_AXIS)), out_specs=PartitionSpec(ROWS_AXIS))
        compiled[key] = jax.jit(local)
      return compiled[key](shared, rows)

    return run

  def gather(self, tree):
    """The outputs of a `map_rows` function as numpy, whole and in row order, on every process."""
    if jax.process_count() == 1:
      return jax.tree.map(np.asarray, tree)
    return multihost_utils.process_allgather(tree, tiled=True)


def raw_key(rng) -> np.ndarray:
  """A PRNG key (typed or raw) as its raw uint32 data, a plain array every process can hold (`replicate` it)."""
  if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
    rng = jax.random.key_data(rng)
  return np.asarray(rng)


def _global_array(x: np.ndarray, sharding: NamedSharding) -> jax.Array:
  """A jax array laid out by `sharding` from `x`, the whole value present on every process (no cross-process
  equality check, unlike `jax.device_put` of numpy to devices of several processes)."""
  return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
