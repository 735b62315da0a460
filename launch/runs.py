"""A sweep point's workdir: its status, its results, and running its commands with the output in launch.log.

Every backend leaves the same files in `<root>/<sweep>/<point>/`: `launch.log` (the output of the run) and,
once the run's command has ended, `exit_code`; the training run itself writes `results.json` at the end.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess

LOG = "launch.log"
EXIT_CODE = "exit_code"
RESULTS = "results.json"

DONE, RUNNING, STOPPED, FAILED, NOT_STARTED = "done", "running", "stopped", "failed", "not started"


def read_results(workdir: str) -> dict | None:
  """`<workdir>/results.json`, or None if the run has not finished (or the file is unreadable)."""
  try:
    with open(os.path.join(workdir, RESULTS)) as f:
      return json.load(f)
  except (FileNotFoundError, json.JSONDecodeError):
    return None


def exit_code(workdir: str) -> int | None:
  """The exit status the point's last command ended with; None while it runs or before it started."""
  try:
    with open(os.path.join(workdir, EXIT_CODE)) as f:
      return int(f.read().strip())
  except (FileNotFoundError, ValueError):
    return None


def status(workdir: str, steps: int) -> str:
  """done (results at `steps`), failed (non-zero exit), stopped (exited 0 before the end, e.g. SIGTERM),
  running (a log but no exit status yet: running, queued, or killed without a chance to record it), or
  not started."""
  results = read_results(workdir)
  if results is not None and results.get("step", 0) >= steps:
    return DONE
  code = exit_code(workdir)
  if code is not None:
    return STOPPED if code == 0 else FAILED
  return RUNNING if os.path.exists(os.path.join(workdir, LOG)) else NOT_STARTED


def run_logged(commands: list[list[str]], workdir: str) -> int:
  """Runs `commands` one after another, stopping at the first that fails, with their output appended to
  `<workdir>/launch.log`; records the exit status in `<workdir>/exit_code` and returns it."""
  os.makedirs(workdir, exist_ok=True)
  code_path = os.path.join(workdir, EXIT_CODE)
  if os.path.exists(code_path):
    os.remove(code_path)
  code = 0
  with open(os.path.join(workdir, LOG), "a") as log:
    for command in commands:
      log.write(f"=== {datetime.datetime.now().isoformat(timespec='seconds')} {shlex.join(command)}\n")
      log.flush()
      code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
      if code:
        log.write(f"=== exit status {code}\n")
        break
  with open(code_path, "w") as f:
    f.write(f"{code}\n")
  return code
