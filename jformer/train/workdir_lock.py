"""One `jformer train` job per workdir: `hold(workdir)` refuses a second job naming the one that holds it.

A local workdir gets an exclusive lock on `<workdir>/.jformer_train.lock` (`paths.file_lock`, not waiting), held
while the run trains. The operating system releases it when the process ends in any way, so a crashed run never
leaves the workdir locked: the file stays behind and only says who held it last. Only process 0 of a job takes the lock:
all processes of one multi-process job share the workdir; the other processes of a refused job stop when its
process 0 exits. A workdir given as a URL (gs://...) is not protected (object stores have no such lock).
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


class WorkdirInUseError(ValueError):
  """Another `jformer train` job holds the workdir's lock."""


@contextlib.contextmanager
def hold(workdir: epath.PathLike) -> Iterator[None]:
  """Holds `workdir`'s train lock while the block runs (process 0, local workdirs; see the module doc).

  Raises:
    WorkdirInUseError: another job holds it; the message names its pid, host and start time, and the fix.
  """
  if not parallel.is_chief() or not paths.is_local(workdir):
    yield
    return
  path = os.path.join(workdir, LOCK_FILE)
  with contextlib.ExitStack() as stack:
    try:
      lock = stack.enter_context(paths.file_lock(path, wait=False))
    except BlockingIOError:
      with open(path, encoding="utf-8") as f:
        holder = f.read().strip() or "a process that has not yet written its name"
      raise WorkdirInUseError(f"{workdir} is in use by another `jformer train` ({holder}; lock {path}); wait for "
                              "it to finish or stop it, or train in another --workdir") from None
    lock.truncate(0)
    lock.write(f"pid {os.getpid()} on {socket.gethostname()} since "
               f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n")
    lock.flush()
    yield
