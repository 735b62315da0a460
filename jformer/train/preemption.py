"""SIGTERM (a preemption notice) -> a clean stop that every host agrees on: the step loop saves a step all hosts
agree on (JAX's preemption sync manager, through Orbax), phase boundaries are agreed by an all-gather, and the run
exits 0; the final test stops at once (`stop_at_once`). Mechanism and phases: docs/training.md#sigterm-preemption.
"""

from __future__ import annotations

import contextlib
import datetime
import signal
from typing import Iterator

import jax
import numpy as np
from absl import logging
from jax._src import distributed as jax_distributed
from jax.experimental import multihost_utils

# The key JAX's preemption sync manager watches (xla/tsl/distributed_runtime/preemption/preemption_sync_manager.cc,
# kPreemptionNoticeKey); its value is the death time in RFC 3339, which starts the agreement on all hosts.
PREEMPTION_NOTICE_KEY = "RECEIVED_PREEMPTION_NOTICE"


class Preempted(Exception):
  """SIGTERM reached a host before a step was trained (or after the last one): nothing new to save."""


@contextlib.contextmanager
def stop_at_once(phase: str) -> Iterator[None]:
  """While the block runs, SIGTERM raises `Preempted(phase)` at once (when the Python code running gets control
  back: after the current device call), for a phase that keeps nothing a rerun needs and that the rerun repeats
  (the final test, a report card's measurement), so that a long one does not outlast a preemption's grace period.
  One process only: a host leaving a phase of collectives would strand the others, so with several the block
  runs as it would (a run's Preemption then stops at the phase's end). The previous handler is put back on exit."""
  if jax.process_count() > 1:
    yield
    return

  def handle(signum, frame):
    del signum, frame
    signal.signal(signal.SIGTERM, previous)  # once: the stop is under way.
    raise Preempted(phase)

  previous = signal.signal(signal.SIGTERM, handle)
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


class Preemption:
  """Installs the SIGTERM handler for the run (a context manager; the previous handler is put back on exit).

  `requested`: this host received SIGTERM. `check(phase)` (called by every host at the same points) raises
  `Preempted(phase)` when any host did. `reached(step, checkpointer)` (called after every step) is True on every
  host at the same step once any host did.
  """

  def __init__(self):
    self.requested = False
    self._hosts = jax.process_count()
    self._previous = None

  def __enter__(self) -> Preemption:
    if self._hosts > 1 and _sync_manager() is None:
      logging.warning("JAX's preemption service is off (jax_enable_preemption_service): hosts cannot agree on a "
                      "step to save, so SIGTERM stops this run without a checkpoint.")
      return self
    self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def __exit__(self, *exc_info):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)

  def _handle(self, signum, frame):
    del signum, frame
    if self.requested:
      return
    self.requested = True
    logging.warning("SIGTERM received: stopping at a step all hosts agree on (saved), or before training if none "
                    "has started.")
    if self._hosts > 1:
      _post_notice()

  def check(self, phase: str) -> None:
    """Raises `Preempted(phase)` if any host received SIGTERM; with several hosts, every host must call it here."""
    stop = self.requested
    if self._hosts > 1:
      stop = bool(np.any(multihost_utils.process_allgather(np.asarray(self.requested))))
    if stop:
      raise Preempted(phase)

  def start(self, step: int, checkpointer) -> None:
    """Called once before the step loop with the restored `step`: reports it to the agreement (a notice that
    comes before the first step is then agreed on the first step, not on step 1), then `check`s."""
    self.reached(step, checkpointer)
    self.check("during initialisation and restore")

  def reached(self, step: int, checkpointer) -> bool:
    """Whether to save `step` and stop: on one host when it received SIGTERM, on several at the step they agreed
    on (Orbax's `reached_preemption`: call it with every step, on every host)."""
    return checkpointer.reached_preemption(step) if self._hosts > 1 else self.requested


def _sync_manager():
  return jax_distributed.global_state.preemption_sync_manager


def _post_notice() -> None:
  """Tells JAX's preemption sync manager on every host that this host will be preempted now."""
  client = jax_distributed.global_state.client
  now = datetime.datetime.now(datetime.timezone.utc).isoformat()
  try:
    client.key_value_set(PREEMPTION_NOTICE_KEY, now)
  except jax.errors.JaxRuntimeError as e:  # another host posted it first: the agreement is under way.
    logging.info("Preemption notice already posted: %s", e)
