"""What the training steps cost, shown while they run: MFU and peak memory on each progress line (and in
TensorBoard), and a `jax.profiler` trace of chosen steps (`train.profile_steps`). How MFU, the peak (a data sheet's,
or on a CPU a measured one) and the memory are counted: docs/training.md (cost).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import resource
import sys
import time

import jax
import jax.numpy as jnp
from absl import logging
from etils import epath

from jformer.models.config import TransformerConfig
from jformer.models.flops import train_flops
from jformer.parallel import say

# bfloat16 dense matmul FLOP/s of one chip (one JAX device), from the vendors' data sheets (NVIDIA's SXM boards);
# the first name found in a device's `device_kind` gives its peak (more specific names first).
PEAK_FLOPS = {
    "TPU v6 lite": 918e12, "TPU v6e": 918e12, "TPU v5 lite": 197e12, "TPU v5e": 197e12, "TPU v5p": 459e12,
    "TPU v5": 459e12, "TPU v4": 275e12, "TPU v3": 123e12, "TPU v2": 45e12,
    "H200": 989e12, "H100": 989e12, "H800": 989e12, "A100": 312e12, "A800": 312e12,
}
# The CPU probe: the best of PROBE_REPS PROBE_SIZE^3 matmuls (2 x 512^3 = 0.27 GFLOP: a few ms each on a CPU).
PROBE_SIZE, PROBE_REPS = 512, 8
MEASURED, RAISED = "measured at start-up", ", raised to the best rate the steps reached"  # ends of a peak's source.


@functools.cache
def measured_peak(dtype_name: str) -> float:
  """FLOP/s of this process's first device on a `PROBE_SIZE`^3 matmul in `dtype_name` (accumulated in float32,
  as `jformer.ops.matmul` runs its products): the best of `PROBE_REPS` timed calls after one that compiles.
  Measured once per process and dtype."""
  device = jax.local_devices()[0]
  a = jax.device_put(jnp.ones((PROBE_SIZE, PROBE_SIZE), dtype_name), device)
  product = jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=jnp.float32))
  product(a, a).block_until_ready()
  best = float("inf")
  for _ in range(PROBE_REPS):
    start = time.perf_counter()
    product(a, a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * PROBE_SIZE**3 / best


def device_peak(device: jax.Device, dtype_name: str) -> tuple[float, str]:
  """(peak FLOP/s of `device`, where it comes from): its chip's entry of `PEAK_FLOPS`, else (a CPU, or a chip not
  in the table) `measured_peak` of the model's compute dtype."""
  for name, flops in PEAK_FLOPS.items():
    if name in device.device_kind:
      return flops, f"{name} bfloat16 data sheet peak"
  if device.platform != "cpu":
    logging.warning("no data sheet peak for device kind %r: MFU divides by a measured %d^3 matmul instead",
                    device.device_kind, PROBE_SIZE)
  return measured_peak(dtype_name), f"{PROBE_SIZE}^3 {dtype_name} matmul {MEASURED}"


def flops_per_token(config: TransformerConfig, length: int) -> float:
  """Train-step matmul FLOPs per token of the model `config` on rows of `length` positions:
  `train_flops(rows=1, length)` over the row's tokens (2 x length for the encoder-decoder: source and target)."""
  tokens = 2 * length if config.architecture == "transformer" else length
  return train_flops(config, rows=1, length=length) / tokens


# The peak memory's scalar names (TensorBoard, results.json) and their labels on the progress line.
MEMORY_LABELS = {"peak_memory_mib": "mem", "peak_rss_mib": "RSS"}


def peak_memory() -> tuple[str, float]:
  """("peak_memory_mib", the largest peak MiB in use of this process's devices) where the backend reports them,
  else ("peak_rss_mib", this process's peak resident MiB: the CPU backend reports no device memory)."""
  stats = [device.memory_stats() for device in jax.local_devices()]
  peaks = [s["peak_bytes_in_use"] for s in stats if s and "peak_bytes_in_use" in s]
  if peaks:
    return "peak_memory_mib", max(peaks) / 2**20
  kib_or_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS.
  return "peak_rss_mib", (kib_or_bytes if sys.platform == "darwin" else kib_or_bytes * 1024) / 2**20


@dataclasses.dataclass
class StepCost:
  """What a run's MFU divides by: its model's FLOPs per token and the peak FLOP/s of this process's devices (a
  `measured` peak is raised to the best rate the steps reach: docs/training.md)."""
  flops_per_token: float
  peak_flops: float  # of all this process's devices together (its tokens/s is this process's).
  peak_source: str
  measured: bool = False  # the peak is the start-up probe's (a CPU), not a data sheet's.

  @classmethod
  def of(cls, model_config: TransformerConfig, length: int) -> StepCost:
    """The cost of training `model_config` on rows of `length` positions on this process's devices."""
    devices = jax.local_devices()
    peak, source = device_peak(devices[0], jnp.dtype(model_config.compute_dtype).name)
    chips = 1 if devices[0].platform == "cpu" else len(devices)  # a CPU's devices share its cores (docs/training.md).
    return cls(flops_per_token(model_config, length), peak * chips, f"{chips} x {source}",
               measured=source.endswith(MEASURED))

  def mfu(self, tokens_per_second: float) -> float:
    """Model FLOPs utilization of this process's devices at `tokens_per_second` (this process's tokens); a
    measured peak below the rate those tokens took is raised to it first (at most 1.0: docs/training.md)."""
    rate = tokens_per_second * self.flops_per_token
    if self.measured and rate > self.peak_flops:
      if not self.peak_source.endswith(RAISED):
        say(f"cost: the steps ran at {rate / 1e9:,.1f} GFLOP/s, above the start-up probe's "
            f"{self.peak_flops / 1e9:,.1f}: MFU divides by the best rate the steps reach from now on")
        self.peak_source += RAISED
      self.peak_flops = rate
    return rate / self.peak_flops

  def describe(self) -> str:
    return (f"MFU = tokens/s x {self.flops_per_token / 1e6:,.3f} MFLOP per token / {self.peak_flops / 1e9:,.1f} "
            f"GFLOP/s ({self.peak_source})")


class StepProfile:
  """A `jax.profiler` trace of steps `first`..`last` (`train.profile_steps`) into `<workdir>/tensorboard` (module
  doc); nothing when `steps` is empty or on processes other than 0. The loop calls `before(step)` before a step's
  work and `after(step, state)` after it; starting and writing the trace happen inside `paused()` (the progress
  line's clock stops: `Progress.paused`), so steps/s counts the traced steps but not the profiler's own work."""

  def __init__(self, workdir: epath.PathLike, steps: tuple[int, ...], paused=contextlib.nullcontext):
    self.steps = tuple(steps) if jax.process_index() == 0 else ()
    self.directory = os.fspath(epath.Path(workdir) / "tensorboard")
    self.paused, self.tracing = paused, False

  def before(self, step: int) -> None:
    if self.steps and not self.tracing and self.steps[0] <= step <= self.steps[1]:
      with self.paused():
        jax.profiler.start_trace(self.directory)
      self.tracing = True

  def after(self, step: int, state) -> None:
    if self.tracing and step >= self.steps[1]:
      jax.block_until_ready(state)
      with self.paused():
        jax.profiler.stop_trace()
      self.tracing = False
      say(f"profile of steps {self.steps[0]}-{step} written to {self.directory}/plugins/profile (TensorBoard's "
          "profile plugin reads it)")

  def close(self) -> None:
    """Ends a trace the run stopped inside of (preemption, an error)."""
    if self.tracing:
      jax.profiler.stop_trace()
      self.tracing = False
