"""A run's files through `etils.epath` (what Orbax and tfds use): local folders and object stores alike.

`--workdir=gs://bucket/run` names a Cloud Storage prefix, not a local folder `./gs:/bucket/run`: code that reads
or writes a run's files takes its paths from `absolute` and goes through `epath.Path` (`open`, `read_bytes`,
`write_text`, `glob`, `mkdir`), never `open()` or `os.path`. epath serves gs:// with gcsfs (`pip install
'jformer[gcs]'`, which also brings google-cloud-storage, which Orbax imports for gs:// checkpoints) or, where
TensorFlow is installed, with its gfile; s3:// with s3fs. Orbax's array files (TensorStore) and tfds's ArrayRecord
files go through those libraries' own Cloud Storage clients. tests/test_workdir_epath.py trains, resumes,
translates and reports a sweep on a local stand-in for gs:// (TensorStore and ArrayRecord pointed at it too);
nothing here has run against real Cloud Storage.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from typing import Iterator, TextIO

from etils import epath


def absolute(path: epath.PathLike) -> epath.Path:
  """`path` as an `epath.Path`: a relative local path made absolute; `gs://...` and other URIs kept as they are."""
  path = epath.Path(path)
  return path if path.is_absolute() else path.resolve()


def is_local(path: epath.PathLike) -> bool:
  """Whether `path` is on the local filesystem (not a `scheme://` URI such as gs://)."""
  return "://" not in os.fspath(path)


def write_atomically(path: epath.PathLike, data: bytes | str) -> None:
  """Writes `data` (text as UTF-8) to `path` via a temporary file beside it, so readers never see a partial file.

  The parent folder is created if missing.
  """
  path = epath.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.parent / f".tmp-{uuid.uuid4().hex[:12]}-{path.name}"
  try:
    tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    tmp.replace(path)
  except BaseException:
    tmp.unlink(missing_ok=True)
    raise


@contextlib.contextmanager
def file_lock(path: str, *, wait: bool = True) -> Iterator[TextIO]:
  """Holds an exclusive `fcntl.flock` on the local file `path` (created if missing) while the block runs, and
  yields the open file (a holder may write who it is). The operating system releases the lock when the block ends
  or the process does, in any way (exit, traceback, kill -9), so no crash leaves it held; flock also holds between
  hosts on NFS (Linux emulates it with fcntl locks there).

  Raises:
    BlockingIOError: `wait=False` and another process holds it.
    OSError: the file cannot be created, or the file system refuses locks (Lustre mounted without `flock`).
  """
  with open(path, "a+", encoding="utf-8") as f:
    fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    yield f
