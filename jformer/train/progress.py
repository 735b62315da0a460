"""Console progress lines (steps/s, tokens/s, MFU, peak memory, ETA) and TensorBoard scalars, written by process 0
only.

TensorBoard event files go to `<workdir>/tensorboard/`, local or on an object store (gs://, s3://, az://) through
`etils.epath`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from typing import Callable

import jax
from etils import epath

from jformer import paths

from jformer.train import cost as cost_lib
from jformer.train import step as step_lib


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class Progress:
  """Averages step metrics between reports and prints `step | loss | acc | lr | steps/s | tokens/s | MFU | memory |
  ETA` (MFU and memory with a `cost`, `jformer.train.cost`; the memory as "mem" or, on a CPU, "RSS"), and each
  source's training tokens so far when `tokens_by_source` gives them (a `data.mixture`: `tokens/<source>`).

  The loop counts each step with `step` (host numbers only) and adds the train step's totals with `add` whenever
  it reads them from the device (every `train.log_every` steps, and before eval and checkpoints).
  """

  def __init__(self, workdir: epath.PathLike, total_steps: int | None, start_step: int,
               cost: cost_lib.StepCost | None = None, tokens_by_source: Callable[[], dict] | None = None):
    self.is_chief = jax.process_index() == 0
    self.total_steps, self.start_step, self.cost = total_steps, start_step, cost
    self.tokens_by_source = tokens_by_source or dict
    self.writer = None
    if self.is_chief:
      from tensorboardX import SummaryWriter, record_writer  # No TensorFlow needed.

      for scheme in _OBJECT_STORES:
        record_writer.register_writer_factory(scheme, _ObjectStoreEventFiles())
      self.writer = SummaryWriter(os.fspath(epath.Path(workdir) / "tensorboard"))
    self._reset(time.perf_counter())
    self.train_seconds = 0.0
    self.train_tokens = 0.0

  def _reset(self, now: float):
    self._sums, self._timed_steps, self._tokens = {}, 0, 0.0
    self._since, self._paused = now, 0.0

  def add(self, totals: dict):
    """Adds train-step totals read from the device (`jformer.train.step.new_totals`) to this report's."""
    for key in step_lib.SUMMED:
      self._sums[key] = self._sums.get(key, 0.0) + float(totals[key])
    self._sums["learning_rate"] = float(totals["learning_rate"])

  def step(self, input_tokens: float, *, timed: bool = True):
    """Counts one step; `input_tokens` counts real source + target tokens of the step (host numbers).

    With `timed=False` (the first step, which includes compilation) the step counts in the averages of the
    metrics but not in steps/s and tokens/s, and the clock restarts after it.
    """
    if timed:
      self._timed_steps += 1
      self._tokens += input_tokens
    else:
      self._since, self._paused = time.perf_counter(), 0.0

  def report(self, step: int) -> dict:
    """Prints and logs the averages since the last report; returns them (with steps/s and tokens/s)."""
    now = time.perf_counter()
    elapsed = max(now - self._since - self._paused, 1e-9)
    averages = step_lib.averages(self._sums) if self._sums else {}
    averages["steps_per_second"] = self._timed_steps / elapsed
    averages["tokens_per_second"] = self._tokens / elapsed
    cost = ""
    if self.cost is not None:  # MFU of timed steps only; the peak memory so far.
      name, mib = cost_lib.peak_memory()
      averages[name] = mib
      if self._timed_steps:
        averages["mfu"] = self.cost.mfu(averages["tokens_per_second"])
      mfu = f"{100 * averages['mfu']:.1f}%" if "mfu" in averages else "--"
      cost = f" | MFU {mfu} | {cost_lib.MEMORY_LABELS[name]} {mib:,.0f} MiB"
    by_source = self.tokens_by_source()
    averages.update({f"tokens/{name}": count for name, count in by_source.items()})
    sources = (" | tokens " + ", ".join(f"{name} {count:,}" for name, count in by_source.items())) if by_source else ""
    self.train_seconds += elapsed
    self.train_tokens += self._tokens
    # No ETA before a timed step (the first, compiling step is not timed): it would divide by zero steps/s; nor
    # before a budgeted run has planned its steps (total_steps None: `jformer.train.budget`).
    eta = (format_duration((self.total_steps - step) / averages["steps_per_second"])
           if self._timed_steps and self.total_steps is not None else "--")
    if self.is_chief:
      print(f"step {step:>6}/{self.total_steps or '?'} | loss {averages.get('loss', float('nan')):.4f} | "
            f"acc {averages.get('accuracy', float('nan')):.3f} | lr {averages.get('learning_rate', 0):.2e} | "
            f"|g| {averages.get('grad_norm', 0):.2f} | {averages['steps_per_second']:.2f} steps/s | "
            f"{averages['tokens_per_second']:,.0f} tok/s{cost} | ETA {eta}"
            + (f" | z-loss {averages['z_loss']:.2e}" if averages.get("z_loss") else "") + sources, flush=True)
      self.scalars(step, averages, prefix="train/")
    self._reset(now)
    return averages

  @contextlib.contextmanager
  def paused(self):
    """Time spent inside (evaluation, BLEU) does not count towards steps/s and tokens/s."""
    start = time.perf_counter()
    try:
      yield
    finally:
      self._paused += time.perf_counter() - start

  def scalars(self, step: int, values: dict, prefix: str = ""):
    if self.writer is not None:
      for key, value in values.items():
        if isinstance(value, (int, float)):
          self.writer.add_scalar(prefix + key, value, step)
      self.writer.flush()

  def close(self):
    if self.writer is not None:
      self.writer.close()


def write_json(path: epath.PathLike, payload: dict):
  """Writes JSON atomically (temp file + rename, `paths.write_atomically`), process 0 only."""
  if jax.process_index() != 0:
    return
  paths.write_atomically(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


# URI schemes whose event files go through epath; tensorboardX picks a writer by the text before the first ':'
# (it would otherwise open `gs://...` as a local file, or need google-cloud-storage / boto3).
_OBJECT_STORES = ("gs", "s3", "az")


class _ObjectStoreEventFiles:
  """tensorboardX writer factory for object-store log dirs: files and folders through epath."""

  def open(self, path: str) -> _ObjectStoreEventFile:
    return _ObjectStoreEventFile(path)

  def directory_check(self, path: str) -> None:
    epath.Path(path).mkdir(parents=True, exist_ok=True)


class _ObjectStoreEventFile:
  """An event file kept in memory and written whole through epath at each flush (objects cannot be appended to,
  as with tensorboardX's own Cloud Storage writer); `Progress.scalars` flushes after each report."""

  def __init__(self, path: str):
    self._path = epath.Path(path)
    self._buffer = io.BytesIO()

  def write(self, data: bytes) -> None:
    self._buffer.write(data)

  def flush(self) -> None:
    self._path.write_bytes(self._buffer.getvalue())

  def close(self) -> None:
    self.flush()
