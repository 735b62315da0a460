"""Process settings, applied by every entry point first thing: a host allocator that makes XLA:CPU steps fast
(`configure_host_allocator`) and a persistent compilation cache (`configure_compilation_cache`).

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

The compilation cache keeps XLA's compiled programs on disk (JAX's persistent cache, `jax_compilation_cache_dir`),
so the sweep points, resumes, `evaluate`, `translate` and `generate` that compile the same programs again (same
model, shapes, shardings, jax and XLA versions, flags) load them instead. It is on by default, in
`$XDG_CACHE_HOME/jformer/xla` (`~/.cache/jformer/xla`); the environment variable JFORMER_COMPILATION_CACHE moves it
(a folder, local or gs://...) or turns it off ('' or 'off'); a JAX_COMPILATION_CACHE_DIR the user set is kept.
As JAX warns, a cache is trusted code: keep it in a folder only you can write to.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import importlib.util
import os
from typing import Callable

# The persistent compilation cache (module doc): where, and what is worth keeping. XLA:CPU compiles a small model's
# train step in seconds, its eval and decode steps in about a second; a program quicker to compile than
# CACHE_MIN_COMPILE_SECONDS is not written (reading an entry costs a file read and a deserialization). Least recently
# used entries are dropped beyond CACHE_MAX_BYTES (`configure_compilation_cache`).
CACHE_ENV = "JFORMER_COMPILATION_CACHE"
CACHE_MIN_COMPILE_SECONDS = 0.5
CACHE_MAX_BYTES = 4 * 2**30
CACHE_LOCK_SECONDS = 10  # JAX's own wait for the folder's lock (`LRUCache`'s lock_timeout_secs).

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


def compilation_cache_folder() -> str | None:
  """Where the persistent compilation cache lives (module doc): JFORMER_COMPILATION_CACHE when set ('' or 'off':
  None, no cache), else JAX_COMPILATION_CACHE_DIR when the user set it, else `$XDG_CACHE_HOME/jformer/xla`
  (`~/.cache/jformer/xla`)."""
  folder = os.environ.get(CACHE_ENV)
  if folder is not None:
    return None if folder.strip().lower() in ("", "off", "0", "false", "none") else os.path.expanduser(folder)
  if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    return os.environ["JAX_COMPILATION_CACHE_DIR"]
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "jformer", "xla")


def configure_compilation_cache(*, min_compile_seconds: float = CACHE_MIN_COMPILE_SECONDS) -> str | None:
  """Turns on JAX's persistent compilation cache in `compilation_cache_folder()`; returns the folder (None: off).

  Call before the first compilation (JAX reads the folder once, when it first compiles); starts no backend.
  Programs compiled in less than `min_compile_seconds` are not written; entries of any size are; at most
  CACHE_MAX_BYTES are kept, least recently used entries dropped.

  Why always with that size limit, and with `filelock` a dependency of jformer: only with a limit does JAX 0.10
  lock the folder (`jax._src.lru_cache.LRUCache`: a `filelock` lock file, `.lockfile`, around every read, write
  and eviction) and write beside each entry `<key>-cache` the time it was last used, `<key>-atime`. Without one it
  writes entries unlocked and without that file (a process may read another's half-written entry), and once
  another process or a later install turns the limit on, its eviction scan reads every entry's `-atime` and
  fails on those that lack one, with a warning at every compilation. So every jformer process runs with the
  limit, the same in every install; an entry that lacks its `-atime` file (written by a process without the
  limit: an older jformer, or another JAX program sharing the folder) gets one when the cache is configured
  (`_repair_access_times`, under the same lock), dated by the entry's modification time. Where `filelock` is
  missing all the same (an install that skipped dependencies) the cache is off, said in one warning line. A
  folder that cannot be written only costs the warnings JAX logs: compiling goes on without the cache.
  """
  import jax

  folder = compilation_cache_folder()
  if folder is None:
    return None
  if importlib.util.find_spec("filelock") is None:
    from absl import logging

    logging.warning("persistent compilation cache off: it needs the `filelock` package (a dependency of jformer: "
                    "pip install filelock), or set %s=off to say so", CACHE_ENV)
    return None
  _repair_access_times(folder)
  jax.config.update("jax_compilation_cache_dir", folder)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
  jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
  return folder


def _repair_access_times(folder: str) -> None:
  """Writes the missing `<key>-atime` file of each `<key>-cache` entry of a local cache `folder` (the entry's
  modification time in ns, the little-endian 8 bytes JAX writes), holding JAX's lock on the folder
  (`configure_compilation_cache` says why). A folder that does not exist yet, or cannot be read or written, is
  left to JAX."""
  import filelock

  if "://" in folder or not os.path.isdir(folder):
    return
  try:
    with filelock.FileLock(os.path.join(folder, ".lockfile"), timeout=CACHE_LOCK_SECONDS):
      for name in os.listdir(folder):
        if not name.endswith("-cache"):
          continue
        atime = os.path.join(folder, name.removesuffix("-cache") + "-atime")
        if not os.path.exists(atime):
          with open(atime, "wb") as f:
            f.write(os.stat(os.path.join(folder, name)).st_mtime_ns.to_bytes(8, "little"))
  except (OSError, filelock.Timeout):
    pass


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


def expected_backend() -> str:
  """The backend JAX's default will be, 'cpu', 'gpu' or 'tpu' (another plugin's own name), decided without
  initializing any backend, as `will_run_on_xla_cpu` decides: the first platform asked for, else the first
  accelerator plugin installed (CUDA and ROCm plugins are 'gpu', libtpu 'tpu'), else 'cpu'. What config
  validation checks a kernel's declared platforms against (`jformer.config.validate`)."""
  asked = [p.strip() for p in requested_platforms().split(",") if p.strip()]
  for name in asked or accelerator_plugins():
    if "tpu" in name:
      return "tpu"
    return "cpu" if name == "cpu" else "gpu" if any(gpu in name for gpu in ("cuda", "rocm", "gpu")) else name
  return "cpu"


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

