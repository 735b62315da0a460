"""Local backend: runs the points on this machine, `parallel` at a time, each as a `jformer train` subprocess.

A point already done (results.json at its train.steps) or still running (launch/runs.py: its running.json's
process alive, or its heartbeat fresh) is skipped; any other point, killed or lost ones included, is claimed
(`runs.claim`), checked again, and runs the train command on its workdir, which resumes from the latest checkpoint if
there is one. A point another launcher holds is skipped, untouched. A failing point does not stop the others; the
return value is the number of points that failed.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
import time

from launch import runs
from launch.backends import shell_join
from launch.sweep import Point, Sweep


def command(sweep: Sweep, point: Point, root: str) -> list[str]:
  """The subprocess that trains `point`, with this Python."""
  return [sys.executable, "-m", "jformer.main", *sweep.train_args(point, sweep.workdir(root, point))]


def run(sweep: Sweep, root: str, *, parallel: int = 1, dry_run: bool = False) -> int:
  """Runs (or with `dry_run` prints) every point that is not done; returns the number that failed."""
  if parallel < 1:
    raise ValueError(f"--parallel={parallel}: give 1 or more points to run at a time")
  pending = []
  for point in sweep.points:
    workdir = sweep.workdir(root, point)
    if runs.to_launch(workdir, point.steps):
      pending.append(point)
    elif runs.status(workdir, point.steps) == runs.DONE:
      print(f"{point.name}: done (step {point.steps} in {workdir}/{runs.RESULTS}), skipped", flush=True)
    else:
      print(f"{point.name}: still running ({os.path.join(workdir, runs.RUNNING_RECORD)}), skipped", flush=True)
  if dry_run:
    for point in pending:
      workdir = sweep.workdir(root, point)
      print(f"# {point.name} (output in {os.path.join(workdir, runs.LOG)})\n"
            f"{shell_join(command(sweep, point, root))}", flush=True)
    return 0
  lock = threading.Lock()

  def run_point(point: Point) -> int:
    workdir = sweep.workdir(root, point)
    try:
      with runs.claim(workdir):
        return claimed_point(point, workdir)
    except runs.Claimed as e:
      with lock:
        print(f"{point.name}: run by another launcher ({e}), skipped", flush=True)
      return 0

  def claimed_point(point: Point, workdir: str) -> int:
    if not runs.to_launch(workdir, point.steps):  # finished or started since the sweep was read.
      with lock:
        print(f"{point.name}: {runs.status(workdir, point.steps)} by now, skipped", flush=True)
      return 0
    with lock:
      print(f"{point.name}: started (log: {os.path.join(workdir, runs.LOG)})", flush=True)
    start = time.perf_counter()
    code = runs.run_logged([command(sweep, point, root)], workdir)
    outcome = "done" if code == 0 else f"FAILED with exit status {code}"
    with lock:
      print(f"{point.name}: {outcome} after {time.perf_counter() - start:.0f}s", flush=True)
    return code

  with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
    codes = list(pool.map(run_point, pending))
  failed = [point.name for point, code in zip(pending, codes) if code]
  if failed:
    print(f"{len(failed)} of {len(sweep.points)} points failed: {', '.join(failed)} (see their {runs.LOG})",
          flush=True)
  return len(failed)
