"""Process settings that make XLA:CPU steps fast; entry points call `configure_host_allocator()` first thing.

XLA:CPU allocates a compiled step's temporary buffer (all activations kept for the backward pass: 100s of MiB)
on every call and frees it afterwards. glibc serves such blocks with `mmap` (or from a per-thread arena that it
trims with `madvise`), so each call page-faults the whole buffer in again, a visible share of a small step's time
(`benchmarks/profile_step.py` shows it). One arena that never returns freed memory to the OS removes the faults:
the next call reuses the same pages.

On a GPU or TPU the step's buffers live in device memory (XLA's own allocator), so the setting would only cost
host memory (one arena, a resident set at its high-water mark, contention between the input pipeline's threads)
for nothing: it is applied only when JAX will run on XLA:CPU. That must be decided before JAX starts its thread
pools, so without initializing a backend (`will_run_on_xla_cpu`): from the platforms asked for (`JAX_PLATFORMS`
or `jax.config.jax_platforms`), else from whether an accelerator plugin is installed (a PJRT plugin under the
`jax_plugins` entry points or namespace package, e.g. jax_cuda12_plugin, or libtpu), which is what JAX itself
tries before falling back to CPU. An installed plugin with no device behind it (a CUDA wheel on a CPU-only
machine) reads as an accelerator: the process then runs with glibc's defaults, slower but correct.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import importlib.util
import os
from typing import Callable

# glibc mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_INT_MAX = 2**31 - 1
DISABLE_ENV = "JFORMER_DEFAULT_ALLOCATOR"
SETTINGS = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _INT_MAX))


def configure_host_allocator() -> bool:
  """Keeps freed heap memory in the process (glibc: one arena, no mmap'd blocks, no trimming) when JAX will run
  on XLA:CPU; returns whether it did.

  Call before JAX starts its thread pools (before the first computation); threads started earlier keep their
  own arenas. A no-op returning False when JAX will run on a GPU or TPU (`will_run_on_xla_cpu`), where the C
  library is not glibc, or when the environment variable JFORMER_DEFAULT_ALLOCATOR=1 asks to leave malloc
  alone. The cost: the process's resident memory stays at its high-water mark (what a training process reaches
  anyway).
  """
  if os.environ.get(DISABLE_ENV) == "1" or not will_run_on_xla_cpu():
    return False
  mallopt = _mallopt()
  return mallopt is not None and all(mallopt(param, value) == 1 for param, value in SETTINGS)


def will_run_on_xla_cpu() -> bool:
  """Whether JAX's default backend will be XLA:CPU, decided without initializing any backend.

  The platforms asked for (`requested_platforms`, e.g. "cpu", "cuda,cpu", "tpu") decide when given: CPU iff
  every one is "cpu". Otherwise JAX takes the first accelerator it can start, so: CPU iff no accelerator plugin
  is installed (`accelerator_plugins`).
  """
  platforms = requested_platforms()
  if platforms:
    return all(p.strip() == "cpu" for p in platforms.split(",") if p.strip())
  return not accelerator_plugins()


def requested_platforms() -> str:
  """The platforms JAX is asked to use: `jax.config.jax_platforms` (which reads JAX_PLATFORMS), '' if none.

  Reading the config imports jax but starts no backend."""
  import jax

  return jax.config.jax_platforms or ""


def accelerator_plugins() -> list[str]:
  """The installed JAX accelerator plugins: PJRT plugins JAX discovers (`jax_plugins` entry points and
  namespace package: jax_cuda12_plugin, jax_cuda13_plugin, ROCm, ...) and libtpu. Nothing is imported."""
  found = [entry.name for entry in importlib.metadata.entry_points(group="jax_plugins")]
  namespace = importlib.util.find_spec("jax_plugins")
  if namespace is not None and namespace.submodule_search_locations:
    found += sorted(name for path in namespace.submodule_search_locations if os.path.isdir(path)
                    for name in os.listdir(path) if not name.startswith(("_", ".")))
  if importlib.util.find_spec("libtpu") is not None:
    found.append("libtpu")
  return found


def _mallopt() -> Callable[[int, int], int] | None:
  """glibc's `mallopt`, or None where the C library has none."""
  try:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
  except (OSError, AttributeError):
    return None


# /proc/cpuinfo flags of x86 CPUs that multiply bfloat16 in hardware: AVX512_BF16 (Intel Cooper Lake and later,
# AMD Zen 4 and later) and AMX (Intel Sapphire Rapids and later). XLA:CPU's bf16 matmuls (float32 accumulation)
# run at about twice the float32 speed there, and emulated, at or below it, elsewhere.
NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags() -> set[str]:
  """The CPU's feature flags from /proc/cpuinfo (the first processor's `flags` line); empty off Linux."""
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("flags"):
          return set(line.split(":", 1)[1].split())
  except OSError:
    pass
  return set()


def auto_dtype(backend: str) -> str:
  """The compute dtype `model.dtype='auto'` picks: 'bfloat16' on GPU and TPU and on CPUs that multiply bfloat16
  natively (`NATIVE_BFLOAT16_FLAGS`), else 'float32'."""
  if backend != "cpu":
    return "bfloat16"
  return "bfloat16" if cpu_flags() & set(NATIVE_BFLOAT16_FLAGS) else "float32"

