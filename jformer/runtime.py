"""Process settings that make XLA:CPU steps fast; entry points call `configure_host_allocator()` first thing.

XLA:CPU allocates a compiled step's temporary buffer (all activations kept for the backward pass: 100s of MiB)
on every call and frees it afterwards. glibc serves such blocks with `mmap` (or from a per-thread arena that it
trims with `madvise`), so each call page-faults the whole buffer in again: measured on the TINY train step of
`benchmarks/train_step.py`, about 43,000 faults (170 MiB) per call, 15% of the step. One arena that never
returns freed memory to the OS removes them: the next call reuses the same pages.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_INT_MAX = 2**31 - 1
DISABLE_ENV = "JFORMER_DEFAULT_ALLOCATOR"


def configure_host_allocator() -> bool:
  """Keeps freed heap memory in the process (glibc: one arena, no mmap'd blocks, no trimming).

  Call before JAX starts its thread pools (before the first computation); threads started earlier keep their
  own arenas. A no-op returning False where the C library is not glibc, or when the environment variable
  JFORMER_DEFAULT_ALLOCATOR=1 asks to leave malloc alone. The cost: the process's resident memory stays at
  its high-water mark (what a training process reaches anyway).
  """
  if os.environ.get(DISABLE_ENV) == "1":
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallopt = libc.mallopt
  except (OSError, AttributeError):
    return False
  return all(mallopt(param, value) == 1 for param, value in
             ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _INT_MAX)))
