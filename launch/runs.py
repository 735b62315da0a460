"""A sweep point's workdir: its status, its results, and running its commands with the output in launch.log.

A launcher claims a point before it runs it (`claim`: an flock on `<point>/launch.lock`, or on an object store a
heartbeat record `<point>/claim.json`) and checks its status again once it holds it, so two launchers started on
one sweep root never run or touch the same point: the second one skips it and says so.

Every backend leaves the same files in `<root>/<sweep>/<point>/`: `launch.log` (the output of the run),
`running.json` while it runs (host, pid and a heartbeat time rewritten every HEARTBEAT_S seconds) and, once the
run's command has ended, `exit_code`; the training run itself writes `results.json` at the end. A point whose
command was killed (SIGKILL, OOM killer) or lost with its node never writes `exit_code`: `status` tells it from
a running one by its pid on this host, or by a heartbeat older than LOST_AFTER_S on another.
The workdir is a local folder or any `etils.epath` path (gs://bucket/sweep/point).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import shlex
import socket
import subprocess
import tempfile
import time
from typing import IO, Iterator

from etils import epath

from jformer import paths

LOG = "launch.log"
EXIT_CODE = "exit_code"
RESULTS = "results.json"
RUNNING_RECORD = "running.json"
CLAIM_LOCK = "launch.lock"  # local folders: the launcher running the point holds an flock on it.
CLAIM_RECORD = "claim.json"  # object stores: the claiming launcher's heartbeat.
HEARTBEAT_S = 60  # A running point rewrites its running.json (and a claim its claim.json) this often.
LOST_AFTER_S = 600  # A point on another host whose heartbeat is older than this is lost (its node died).
CLAIM_SETTLE_S = 2.0  # object stores: a claim written is read back after this long, to see who won a race.

DONE, RUNNING, STOPPED, FAILED, KILLED, LOST, NOT_STARTED = (
    "done", "running", "stopped", "failed", "killed", "lost", "not started")


class Claimed(Exception):
  """Another launcher holds the point (the message names it)."""


@contextlib.contextmanager
def claim(workdir: epath.PathLike) -> Iterator[None]:
  """Holds the point in `workdir` for this launcher while the block runs.

  A local folder (NFS included): an exclusive, non-waiting flock on `<workdir>/launch.lock` (`paths.file_lock`),
  which the operating system releases when the launcher ends in any way; the file names its holder. An object
  store (gs://), which has no locks: a record `<workdir>/claim.json` with this launcher's id and a heartbeat,
  taken when absent or older than LOST_AFTER_S, read back after CLAIM_SETTLE_S to see which of two racing
  launchers won, rewritten every HEARTBEAT_S and removed at the end.

  Raises:
    Claimed: another launcher holds it.
  """
  workdir = epath.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  me = f"launcher pid {os.getpid()} on {socket.gethostname()} since {datetime.datetime.now().isoformat('T', 'seconds')}"
  if paths.is_local(workdir):
    path = os.path.join(workdir, CLAIM_LOCK)
    with contextlib.ExitStack() as stack:
      try:
        lock = stack.enter_context(paths.file_lock(path, wait=False))
      except BlockingIOError:
        with open(path, encoding="utf-8") as f:
          holder = ([line for line in f.read().splitlines() if line.strip()] or ["another launcher"])[-1]
        raise Claimed(f"held by {holder} ({path})") from None
      lock.truncate(0)
      lock.write(me + "\n")
      lock.flush()
      yield
    return
  try:
    with paths.heartbeat_claim(workdir / CLAIM_RECORD, me, stale_after_s=LOST_AFTER_S, beat_s=HEARTBEAT_S,
                               settle_s=CLAIM_SETTLE_S):
      yield
  except paths.HeldElsewhere as e:
    raise Claimed(str(e)) from None


def _read_json(path: epath.Path) -> dict | None:
  try:
    return json.loads(path.read_text())
  except (FileNotFoundError, json.JSONDecodeError):
    return None


def read_results(workdir: str) -> dict | None:
  """`<workdir>/results.json`, or None if the run has not written it (or the file is unreadable)."""
  return _read_json(epath.Path(workdir) / RESULTS)


def exit_code(workdir: str) -> int | None:
  """The exit status the point's last command ended with; None while it runs or before it started."""
  try:
    return int((epath.Path(workdir) / EXIT_CODE).read_text().strip())
  except (FileNotFoundError, ValueError):
    return None


def read_running(workdir: str) -> dict | None:
  """`<workdir>/running.json` ({"host", "pid", "heartbeat": unix time, ...}), or None if absent or unreadable."""
  return _read_json(epath.Path(workdir) / RUNNING_RECORD)


def write_running(workdir: epath.PathLike, pid: int) -> None:
  """Records that `pid` on this host runs the point's command, with the current time as its heartbeat."""
  record = {"host": socket.gethostname(), "pid": pid, "heartbeat": time.time()}
  paths.write_atomically(epath.Path(workdir) / RUNNING_RECORD, json.dumps(record) + "\n")


def to_launch(workdir: str, steps: int) -> bool:
  """Whether a (re)launch should start the point: not done, and not running under a running.json of its own
  (a killed, lost, failed or stopped point resumes from its latest checkpoint)."""
  state = status(workdir, steps)
  return state != DONE and not (state == RUNNING and read_running(workdir) is not None)


def status(workdir: str, steps: int, *, now: float | None = None) -> str:
  """done (results at `steps`, or at the steps its `train.budget_minutes` planned, or ended by train.patience), failed (non-zero exit), stopped
  (exited 0 before the end, e.g. SIGTERM), running, killed (ended by a signal, or no exit status and its recorded pid
  is gone from this host: SIGKILL, OOM killer, scancel), lost (no exit status and, on another host, a SLURM job that
  squeue no longer lists or no heartbeat for LOST_AFTER_S seconds: its node died), or not started. A log with no exit
  status and no running.json (from a launcher before heartbeats) counts as running."""
  results = read_results(workdir)
  if (results is not None and results.get("finished", True)  # written before its final test: not done.
      and (results.get("step", 0) >= results.get("planned_steps", steps)  # a time budget's plan.
           or results.get("stopped_by_patience"))):  # train.patience ended it (jformer/train/selection.py).
    return DONE
  code = exit_code(workdir)
  if code is not None:
    return STOPPED if code == 0 else KILLED if code < 0 else FAILED
  record = read_running(workdir)
  if record is not None:
    if record.get("host") == socket.gethostname():
      return RUNNING if _alive(int(record["pid"])) else KILLED
    if "slurm_job" in record and _slurm_job_gone(record["slurm_job"]):
      return LOST
    age = (time.time() if now is None else now) - float(record.get("heartbeat", 0))
    return LOST if age > LOST_AFTER_S else RUNNING
  return RUNNING if (epath.Path(workdir) / LOG).exists() else NOT_STARTED


def _slurm_job_gone(job: str) -> bool:
  """Whether SLURM says job `job` (`<array job>_<task>`) has left the queue; False when squeue is not on PATH
  here or does not answer (the heartbeat decides then)."""
  try:
    queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30)
  except (FileNotFoundError, subprocess.TimeoutExpired):
    return False
  if queued.returncode:
    return "Invalid job id" in queued.stderr
  return not queued.stdout.strip()


def _alive(pid: int) -> bool:
  """Whether process `pid` exists on this host (a zombie, already ended, counts as gone)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # Another user's process.
    return True
  try:
    return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
  except (FileNotFoundError, IndexError):  # No /proc (macOS): os.kill's answer stands.
    return True


def run_logged(commands: list[list[str]], workdir: epath.PathLike) -> int:
  """Runs `commands` one after another, stopping at the first that fails, with their output appended to
  `<workdir>/launch.log`; records the exit status in `<workdir>/exit_code` and returns it. While a command runs,
  `<workdir>/running.json` holds this host, the command's pid and a heartbeat rewritten every HEARTBEAT_S s."""
  workdir = epath.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / EXIT_CODE).unlink(missing_ok=True)
  code = 0
  with _appended(workdir / LOG) as log:
    for command in commands:
      log.write(f"=== {datetime.datetime.now().isoformat(timespec='seconds')} {shlex.join(command)}\n")
      log.flush()
      process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
      with _heartbeat(workdir, process):
        code = process.wait()
      if code:
        log.write(f"=== exit status {code}\n")
        break
  paths.write_atomically(workdir / EXIT_CODE, f"{code}\n")
  (workdir / RUNNING_RECORD).unlink(missing_ok=True)
  return code


@contextlib.contextmanager
def _heartbeat(workdir: epath.Path, process: subprocess.Popen) -> Iterator[None]:
  """Writes running.json for `process` now and every HEARTBEAT_S seconds until the block ends."""
  write_running(workdir, process.pid)
  with paths.every(HEARTBEAT_S, lambda: write_running(workdir, process.pid)):
    yield


@contextlib.contextmanager
def _appended(path: epath.Path) -> Iterator[IO[str]]:
  """`path` opened for appending. An object store (gs://) has no appends and gives a subprocess no file to write
  to: there the output goes to a local temporary file, and `path` is written whole at the start (so the point
  shows as running) and again at the end."""
  if paths.is_local(path):
    with open(path, "a") as log:
      yield log
    return
  previous = path.read_bytes() if path.exists() else b""
  path.write_bytes(previous)
  fd, local = tempfile.mkstemp(suffix=f"-{LOG}")
  os.close(fd)
  try:
    pathlib.Path(local).write_bytes(previous)
    with open(local, "a") as log:
      yield log
  finally:
    path.write_bytes(pathlib.Path(local).read_bytes())
    os.remove(local)
