"""SLURM backend: one sbatch script, a job array with one task per point, submitted with `sbatch --parsable`.

Each array task picks its point from a `case` on $SLURM_ARRAY_TASK_ID, then starts `jformer train` under
`srun` with one process per node and the multi-host environment for `jax.distributed`:
JFORMER_COORDINATOR_ADDRESS (first node of the allocation, a port per array task), JFORMER_NUM_PROCESSES
(SLURM_NTASKS) and JFORMER_PROCESS_ID (SLURM_PROCID, set inside each task). The output goes to the point's
`launch.log` and the exit status to its `exit_code`, as with the local backend; while the task runs, its
`running.json` holds the node, the batch shell's pid, the job id and a heartbeat rewritten every
runs.HEARTBEAT_S seconds (so `launch.report` shows a task killed, or lost with its node, as such). A task first
claims its point with `flock` on the point's launch.lock (the lock `runs.claim` takes): a point another launcher
or task holds is skipped, untouched. Points already done or running are left out of the array; a resubmission of
the same script (after a time limit or preemption) resumes the others (`jformer train` on a finished point does
nothing).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys

from jformer import paths
from launch import runs
from launch.backends import merge_settings, require_tool, shell_join, shell_word
from launch.sweep import Sweep, SweepError

COORDINATOR_PORT = 12355  # jax.distributed coordinator port of array task 0; task i uses port + i % 1000.


@dataclasses.dataclass(frozen=True)
class Settings:
  """Resources of every array task (sweep file `SLURM = {...}`, overridden by launch flags)."""
  nodes: int = 1  # Nodes per point (one training process per node).
  gpus_per_node: int = 0  # --gpus-per-node; 0 = no GPU request.
  time: str = "01:00:00"  # Time limit per point (SIGTERM then saves a checkpoint; resubmit to resume).
  partition: str = ""  # "" = the cluster's default partition.
  account: str = ""  # "" = the user's default account.
  setup: str = ""  # Shell lines run before training, e.g. "module load cuda/12.4".


def settings(sweep: Sweep, **flags) -> Settings:
  """The sweep file's SLURM settings with the given (non-None) flags on top."""
  return merge_settings(Settings, sweep.name, "SLURM", sweep.slurm, flags)


def script_path(sweep: Sweep, root: str) -> str:
  return os.path.join(root, sweep.name, f"{sweep.name}.sbatch")


def render(sweep: Sweep, root: str, settings: Settings, *, python: str, project_dir: str,
           tasks: list[int] | None = None, parallel: int | None = None) -> str:
  """The sbatch script for the points with index in `tasks` (default all); `parallel` caps running tasks.

  `root`, `python` and `project_dir` should be absolute: the job runs in `project_dir` on another machine.
  """
  tasks = list(range(len(sweep.points))) if tasks is None else tasks
  array = f"0-{len(sweep.points) - 1}" if tasks == list(range(len(sweep.points))) else ",".join(map(str, tasks))
  directives = [
      f"--job-name=jformer-{sweep.name}",
      f"--array={array}" + (f"%{parallel}" if parallel else ""),
      f"--nodes={settings.nodes}",
      "--ntasks-per-node=1",
      *([f"--gpus-per-node={settings.gpus_per_node}"] if settings.gpus_per_node else []),
      f"--time={settings.time}",
      *([f"--partition={settings.partition}"] if settings.partition else []),
      *([f"--account={settings.account}"] if settings.account else []),
      f"--chdir={project_dir}",
      f"--output={os.path.join(root, sweep.name, 'slurm-%A_%a.out')}",
  ]
  cases = []
  for index, point in enumerate(sweep.points):
    overrides = shell_join(sweep.point_args(point))
    cases.append(f"  {index}) POINT={shlex.quote(point.name)}; OVERRIDES=({overrides}) ;;")
  common = sweep.common_args()
  lines = [
      "#!/bin/bash",
      f"# jformer sweep '{sweep.name}': {len(sweep.points)} points, one array task each (python -m launch).",
      *[f"#SBATCH {directive}" for directive in directives],
      "set -euo pipefail",
      *([settings.setup.strip()] if settings.setup.strip() else []),
      *(["COMMON=(", *[f"  {shell_word(arg)}" for arg in common], ")"] if common else ["COMMON=()"]),
      'case "$SLURM_ARRAY_TASK_ID" in',
      *cases,
      '  *) echo "no sweep point for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;',
      "esac",
      f"WORKDIR={shlex.quote(os.path.join(root, sweep.name))}/\"$POINT\"",
      'mkdir -p "$WORKDIR"',
      f'exec 9>>"$WORKDIR/{runs.CLAIM_LOCK}"  # the point\'s claim (launch/runs.py): held until this task ends.',
      f'if ! flock -n 9; then echo "=== $(date -Iseconds) point $POINT is run by another launcher '
      f'($WORKDIR/{runs.CLAIM_LOCK}): skipped" >> "$WORKDIR/{runs.LOG}"; exit 0; fi',
      'echo "slurm job ${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID on $(hostname) since $(date -Iseconds)" >&9',
      f'rm -f "$WORKDIR/{runs.EXIT_CODE}"',
      'COORDINATOR_HOST="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
      f'export JFORMER_COORDINATOR_ADDRESS="$COORDINATOR_HOST:$(({COORDINATOR_PORT} + SLURM_ARRAY_TASK_ID % 1000))"',
      'export JFORMER_NUM_PROCESSES="$SLURM_NTASKS"',
      f'echo "=== $(date -Iseconds) slurm job ${{SLURM_ARRAY_JOB_ID}}_$SLURM_ARRAY_TASK_ID: point $POINT on '
      f'$SLURM_JOB_NODELIST, $JFORMER_NUM_PROCESSES process(es), coordinator $JFORMER_COORDINATOR_ADDRESS" '
      f'>> "$WORKDIR/{runs.LOG}"',
      f'beat() {{ printf \'{{"host": "%s", "pid": %d, "heartbeat": %d, "slurm_job": "%s"}}\\n\' "$(hostname)" $$ '
      f'"$(date +%s)" "${{SLURM_ARRAY_JOB_ID}}_$SLURM_ARRAY_TASK_ID" > "$WORKDIR/{runs.RUNNING_RECORD}.tmp" && '
      f'mv "$WORKDIR/{runs.RUNNING_RECORD}.tmp" "$WORKDIR/{runs.RUNNING_RECORD}"; }}',
      f"beat; (while sleep {runs.HEARTBEAT_S}; do beat; done) & HEARTBEAT=$!",
      "status=0",
      "srun --kill-on-bad-exit=1 bash -c 'export JFORMER_PROCESS_ID=\"$SLURM_PROCID\"; exec \"$@\"' jformer \\",
      f'  {shlex.quote(python)} -m jformer.main train --config={shlex.quote(sweep.base)} --workdir="$WORKDIR" '
      f'"${{COMMON[@]}}" "${{OVERRIDES[@]}}" \\',
      f'  >> "$WORKDIR/{runs.LOG}" 2>&1 || status=$?',
      f'echo "$status" > "$WORKDIR/{runs.EXIT_CODE}"',
      'kill "$HEARTBEAT" 2>/dev/null || true; wait "$HEARTBEAT" 2>/dev/null || true; '
      f'rm -f "$WORKDIR/{runs.RUNNING_RECORD}"',
      'exit "$status"',
  ]
  return "\n".join(lines) + "\n"


def run(sweep: Sweep, root: str, settings: Settings, *, parallel: int | None = None, dry_run: bool = False,
        python: str = sys.executable) -> int:
  """Writes and submits (or with `dry_run` prints) the job array of the points not done; returns 0 or 1."""
  if not paths.is_local(root):
    raise SweepError(f"--root={root}: the slurm backend writes its job script and each point's launch.log with the "
                     "shell; give a folder every node mounts (e.g. on NFS). A gs:// root works with --backend=local "
                     "or --backend=tpu_vm.")
  root = os.path.abspath(root)
  tasks = [i for i, point in enumerate(sweep.points) if runs.to_launch(sweep.workdir(root, point), point.steps)]
  if not tasks:
    print(f"all {len(sweep.points)} points of '{sweep.name}' are done or running; nothing to submit", flush=True)
    return 0
  script = render(sweep, root, settings, python=python, project_dir=os.getcwd(), tasks=tasks, parallel=parallel)
  path = script_path(sweep, root)
  submit = ["sbatch", "--parsable", path]
  if dry_run:
    print(f"# {path}\n{script}\n# submitted with:\n{shell_join(submit)}", flush=True)
    return 0
  require_tool("sbatch", "run on a SLURM login node, or use --backend=local (to try SLURM on one machine: "
               "launch/testing/slurm_single_node.sh)")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(script)
  result = subprocess.run(submit, capture_output=True, text=True)
  if result.returncode:
    print(f"sbatch failed (exit status {result.returncode}): {result.stderr.strip()}", flush=True)
    return 1
  job_id = result.stdout.strip().split(";")[0]
  print(f"submitted job array {job_id} ({len(tasks)} of {len(sweep.points)} points) from {path}; "
        f"logs in {os.path.join(root, sweep.name, '<point>', runs.LOG)}", flush=True)
  return 0
