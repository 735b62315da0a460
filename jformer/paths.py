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
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from typing import Callable, Iterator, TextIO

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


def checksum(path: epath.PathLike) -> dict:
  """`{"bytes": size, "sha256": hex digest}` of the file `path` (local or gs://)."""
  digest = hashlib.sha256()
  size = 0
  with epath.Path(path).open("rb") as f:
    while chunk := f.read(1 << 22):
      digest.update(chunk)
      size += len(chunk)
  return {"bytes": size, "sha256": digest.hexdigest()}


def record_checksum(path: epath.PathLike, record: epath.PathLike, **details) -> None:
  """Writes `path`'s checksum to the JSON file `record`: what `checksum_problem` later compares the file with;
  `details` (JSON values, e.g. what the file was made from) are recorded beside it."""
  write_atomically(record, json.dumps({"file": os.fspath(path), **checksum(path), **details}, indent=1) + "\n")


def checksum_problem(path: epath.PathLike, record: epath.PathLike) -> str | None:
  """How the file `path` differs from the checksum in `record` (written by `record_checksum`), or None if it is the
  same file; None too when there is no record (a file from before records were kept)."""
  record = epath.Path(record)
  if not record.exists():
    return None
  expected = json.loads(record.read_text())
  if not epath.Path(path).exists():
    return f"{os.fspath(path)} is missing"
  actual = checksum(path)
  if actual == {key: expected[key] for key in actual}:
    return None
  what = "truncated or extended" if actual["bytes"] != expected["bytes"] else "same size, other bytes"
  return (f"{os.fspath(path)} changed since it was recorded ({what}: {actual['bytes']:,} bytes, sha256 "
          f"{actual['sha256'][:12]}..., against {expected['bytes']:,} bytes, sha256 {expected['sha256'][:12]}... in "
          f"{os.fspath(record)})")


class HeldElsewhere(Exception):
  """A heartbeat claim (`heartbeat_claim`) is held by someone else; the message names them."""


@contextlib.contextmanager
def every(seconds: float, action: Callable[[], object]) -> Iterator[None]:
  """Calls `action` every `seconds` in a background thread while the block runs (a heartbeat), and waits for the
  thread at the end."""
  stop = threading.Event()

  def repeat():
    while not stop.wait(seconds):
      action()

  thread = threading.Thread(target=repeat, daemon=True)
  thread.start()
  try:
    yield
  finally:
    stop.set()
    thread.join()


@contextlib.contextmanager
def heartbeat_claim(record: epath.PathLike, holder: str, *, stale_after_s: float, beat_s: float,
                    settle_s: float) -> Iterator[None]:
  """Holds a claim on an object store (gs://, which has no locks) while the block runs: the JSON file `record` with
  `holder` and a heartbeat time, taken when absent or older than `stale_after_s`, read back after `settle_s` to see
  which of two claimants that raced won (the last writer), rewritten every `beat_s`, removed at the end (if still
  ours). A best effort for stores without conditional writes; a local folder takes a `file_lock` instead.

  Raises:
    HeldElsewhere: another holder's heartbeat is fresh, or another claimant won the race.
  """
  record = epath.Path(record)
  held = _read_json(record)
  if held is not None and time.time() - float(held.get("heartbeat", 0)) < stale_after_s:
    raise HeldElsewhere(f"held by {held.get('holder')} (heartbeat {os.fspath(record)})")
  claim_id = f"{uuid.uuid4().hex[:12]}@{socket.gethostname()}"
  write = lambda: write_atomically(record, json.dumps({"holder": holder, "id": claim_id, "heartbeat": time.time()}))
  write()
  time.sleep(settle_s)
  held = _read_json(record)
  if held is None or held.get("id") != claim_id:
    raise HeldElsewhere(f"taken by {None if held is None else held.get('holder')} at the same time "
                        f"({os.fspath(record)})")
  try:
    with every(beat_s, write):
      yield
  finally:
    if (_read_json(record) or {}).get("id") == claim_id:
      record.unlink(missing_ok=True)


def _read_json(path: epath.Path) -> dict | None:
  try:
    return json.loads(path.read_text())
  except (FileNotFoundError, json.JSONDecodeError):
    return None
