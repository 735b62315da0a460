"""Where and from what a measured figure comes: the machine (CPU model and SIMD flags, cores, JAX backend and
device), the software versions, the date and the git commit. Benchmarks and `jformer report-card` record it beside
every figure, since figures compare only when measured on one machine."""

from __future__ import annotations

import datetime
import os
import pathlib
import platform
import subprocess

from jformer import runtime

# The /proc/cpuinfo flags (prefixes) that decide how fast XLA's CPU kernels can be: the vector instruction sets.
SIMD_FLAGS = ("avx", "fma", "f16c", "amx", "sse4")


def git_commit(repo: str | os.PathLike, exclude: tuple[str, ...] = ()) -> str:
  """`git rev-parse --short HEAD` of `repo`, with "-dirty" when tracked files have uncommitted changes outside
  `exclude` (folders relative to `repo` where the measuring tools write their results); "unknown" outside git (or
  without git)."""
  def git(*args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60)

  try:
    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0 or not head.stdout.strip():
      return "unknown"
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 *(f":(exclude){folder}" for folder in exclude))
  except (OSError, subprocess.SubprocessError):
    return "unknown"
  return head.stdout.strip() + ("-dirty" if status.returncode != 0 or status.stdout.strip() else "")


def cpu_model() -> str:
  """The CPU's model name from /proc/cpuinfo (`platform.processor()` off Linux)."""
  try:
    with open("/proc/cpuinfo") as f:
      return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
  except (OSError, StopIteration):
    return platform.processor()


def machine(repo: str | os.PathLike, exclude: tuple[str, ...] = ()) -> dict:
  """The machine and software the figures come from (`cpu_flags`: its SIMD_FLAGS, '' off Linux), when, and the
  commit of `repo` (`git_commit(repo, exclude)`)."""
  import flax
  import jax
  import jaxlib

  flags = sorted(flag for flag in runtime.cpu_flags() if flag.startswith(SIMD_FLAGS))
  return {"cpu": cpu_model(), "cpu_flags": " ".join(flags),
          "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
          "backend": jax.default_backend(), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
          "jaxlib": jaxlib.__version__, "flax": flax.__version__, "python": platform.python_version(),
          "date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": git_commit(pathlib.Path(repo),
                                                                                               exclude)}


def describe(info: dict) -> str:
  """One line naming `machine()`'s machine: CPU model (flags), CPUs, backend, jax version."""
  return (f"{info['cpu']} ({info['cpu_flags'] or 'flags unknown'}), {info['cpus']} CPUs, {info['backend']}, "
          f"jax {info['jax']}")
