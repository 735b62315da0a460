"""One `jformer train` job per workdir: `hold(workdir)` refuses a second job naming the one that holds it: a lock
file on a local workdir (released by the OS however the process ends), a heartbeat claim on an object store.
Details: docs/training.md (one job per workdir).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import Iterator

from etils import epath

from jformer import parallel, paths

LOCK_FILE = ".jformer_train.lock"
CLAIM_FILE = ".jformer_train.claim.json"  # object stores.
HEARTBEAT_S = 60.0
STALE_AFTER_S = 600.0
CLAIM_SETTLE_S = 2.0


class WorkdirInUseError(ValueError):
  """Another `jformer train` job holds the workdir's lock."""


@contextlib.contextmanager
def hold(workdir: epath.PathLike) -> Iterator[None]:
  """Holds `workdir`'s train lock (a local folder) or claim (an object store) while the block runs, on process 0
  (docs/training.md).

  Raises:
    WorkdirInUseError: another job holds it; the message names its pid, host and start time, and the fix.
  """
  if not parallel.is_chief():
    yield
    return
  holder = (f"pid {os.getpid()} on {socket.gethostname()} since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
  if not paths.is_local(workdir):
    try:
      with paths.heartbeat_claim(epath.Path(workdir) / CLAIM_FILE, holder, stale_after_s=STALE_AFTER_S,
                                 beat_s=HEARTBEAT_S, settle_s=CLAIM_SETTLE_S):
        yield
    except paths.HeldElsewhere as e:
      raise WorkdirInUseError(f"{workdir} is in use by another `jformer train` ({e}); wait for it to finish or stop "
                              "it, or train in another --workdir") from None
    return
  path = os.path.join(workdir, LOCK_FILE)
  with contextlib.ExitStack() as stack:
    try:
      lock = stack.enter_context(paths.file_lock(path, wait=False))
    except BlockingIOError:
      with open(path, encoding="utf-8") as f:
        other = f.read().strip() or "a process that has not yet written its name"
      raise WorkdirInUseError(f"{workdir} is in use by another `jformer train` ({other}; lock {path}); wait for "
                              "it to finish or stop it, or train in another --workdir") from None
    lock.truncate(0)
    lock.write(holder + "\n")
    lock.flush()
    yield
