"""Console progress lines (steps/s, tokens/s, ETA) and TensorBoard scalars, written by process 0 only."""

from __future__ import annotations

import contextlib
import json
import os
import time

import jax


def format_duration(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  hours, rest = divmod(seconds, 3600)
  return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class Progress:
  """Averages step metrics between reports and prints `step | loss | acc | lr | steps/s | tokens/s | ETA`."""

  def __init__(self, workdir: str, total_steps: int, start_step: int):
    self.is_chief = jax.process_index() == 0
    self.total_steps, self.start_step = total_steps, start_step
    self.writer = None
    if self.is_chief:
      from tensorboardX import SummaryWriter  # No TensorFlow needed.

      self.writer = SummaryWriter(os.path.join(workdir, "tensorboard"))
    self._reset(time.perf_counter())
    self.train_seconds = 0.0
    self.train_tokens = 0.0

  def _reset(self, now: float):
    self._sums, self._count, self._timed_steps, self._tokens = {}, 0, 0, 0.0
    self._since, self._paused = now, 0.0

  def add(self, metrics: dict, input_tokens: float, *, timed: bool = True):
    """Adds one step's host-side metrics; `input_tokens` counts real source + target tokens of the step.

    With `timed=False` (the first step, which includes compilation) the step counts in the averages of the
    metrics but not in steps/s and tokens/s, and the clock restarts after it.
    """
    for key, value in metrics.items():
      self._sums[key] = self._sums.get(key, 0.0) + float(value)
    self._count += 1
    if timed:
      self._timed_steps += 1
      self._tokens += input_tokens
    else:
      self._since, self._paused = time.perf_counter(), 0.0

  def report(self, step: int) -> dict:
    """Prints and logs the averages since the last report; returns them (with steps/s and tokens/s)."""
    now = time.perf_counter()
    elapsed = max(now - self._since - self._paused, 1e-9)
    averages = {k: v / max(self._count, 1) for k, v in self._sums.items()}
    averages["steps_per_second"] = self._timed_steps / elapsed
    averages["tokens_per_second"] = self._tokens / elapsed
    self.train_seconds += elapsed
    self.train_tokens += self._tokens
    eta = (self.total_steps - step) / max(averages["steps_per_second"], 1e-9)
    if self.is_chief:
      print(f"step {step:>6}/{self.total_steps} | loss {averages.get('loss', float('nan')):.4f} | "
            f"acc {averages.get('accuracy', float('nan')):.3f} | lr {averages.get('learning_rate', 0):.2e} | "
            f"|g| {averages.get('grad_norm', 0):.2f} | {averages['steps_per_second']:.2f} steps/s | "
            f"{averages['tokens_per_second']:,.0f} tok/s | ETA {format_duration(eta)}", flush=True)
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


def write_json(path: str, payload: dict):
  """Writes JSON atomically (temp file + rename), process 0 only."""
  if jax.process_index() != 0:
    return
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    json.dump(payload, f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)
