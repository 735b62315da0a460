"""TPU VM backend: the points run one after another on one Cloud TPU VM slice, through `gcloud`.

1. create the TPU VM (`accelerator_type`, `version`) unless `gcloud compute tpus tpu-vm describe` finds it;
2. on every worker: clone `repo` into ~/jformer (once), check out `ref`, make a Python 3.12 venv with uv and
   `pip install -e '.[gcs]' jax[tpu]` (gcs: gs:// workdirs);
3. for each point not done here: `jformer train` on all workers at once (`--worker=all`; jax.distributed finds
   the slice's hosts itself), with the output in `<root>/<sweep>/<point>/launch.log` here. A local `--root` is
   relative to ~/jformer on the workers (for multi-host slices point it at storage all workers share, since every
   host writes checkpoints): then results.json, config.json and tensorboard/ are copied from worker 0 into that
   local folder, so `python -m launch.report` works here. A `--root=gs://bucket/runs` is shared by the workers and
   read by `launch.report` directly (through etils.epath): nothing is copied. BASE must be a path in the repo.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess

from jformer import paths
from launch import runs
from launch.backends import merge_settings, require_tool, shell_join
from launch.sweep import Point, Sweep, SweepError

CLONE_DIR = "jformer"  # Clone of the project in each worker's home directory.


@dataclasses.dataclass(frozen=True)
class Settings:
  """The slice and the code it runs (sweep file `TPU = {...}`, overridden by launch flags)."""
  name: str = ""  # TPU VM name.
  zone: str = ""  # e.g. us-central2-b.
  accelerator_type: str = ""  # e.g. v4-32; used only to create the VM when it does not exist.
  version: str = "tpu-ubuntu2204-base"  # TPU software version the VM is created with.
  project: str = ""  # "" = gcloud's default project.
  repo: str = ""  # git URL the workers clone; "" = this checkout's `origin` remote.
  ref: str = ""  # full commit hash, branch or tag the workers run; "" = this checkout's HEAD (push it first).


def settings(sweep: Sweep, **flags) -> Settings:
  """The sweep file's TPU settings with the given (non-None) flags on top; repo and ref default from git."""
  merged = merge_settings(Settings, sweep.name, "TPU", sweep.tpu, flags)
  missing = [key for key in ("name", "zone", "accelerator_type") if not getattr(merged, key)]
  if missing:
    raise SweepError(f"sweep '{sweep.name}': the tpu_vm backend needs TPU settings {missing}: set them in the "
                     f"sweep file's TPU = {{...}} or pass --tpu_name/--zone/--accelerator_type")
  return dataclasses.replace(merged, repo=merged.repo or _git("remote", "get-url", "origin", what="repo"),
                             ref=merged.ref or _git("rev-parse", "HEAD", what="ref"))


def _git(*args: str, what: str) -> str:
  result = subprocess.run(["git", *args], capture_output=True, text=True)
  if result.returncode:
    raise SweepError(f"`git {' '.join(args)}` failed ({result.stderr.strip()}): set TPU['{what}'] in the sweep file")
  return result.stdout.strip()


def _gcloud(settings: Settings, verb: str, *args: str, named: bool = True) -> list[str]:
  """`gcloud compute tpus tpu-vm VERB [NAME] --zone=ZONE [--project=PROJECT] ARGS...`."""
  project = [f"--project={settings.project}"] if settings.project else []
  return ["gcloud", "compute", "tpus", "tpu-vm", verb, *([settings.name] if named else []),
          f"--zone={settings.zone}", *project, *args]


def describe_command(settings: Settings) -> list[str]:
  return _gcloud(settings, "describe")


def create_command(settings: Settings) -> list[str]:
  return _gcloud(settings, "create", f"--accelerator-type={settings.accelerator_type}", f"--version={settings.version}")


def install_command(settings: Settings) -> list[str]:
  """Clones (once) and updates the project on every worker and installs it into ~/jformer/.venv."""
  steps = [
      "set -e",
      f"[ -d {CLONE_DIR} ] || git clone -q {shlex.quote(settings.repo)} {CLONE_DIR}",
      f"cd {CLONE_DIR}",
      f"git fetch -q origin {shlex.quote(settings.ref)}",
      "git checkout -q --detach FETCH_HEAD",
      'export PATH="$HOME/.local/bin:$PATH"',
      "command -v uv >/dev/null || curl -LsSf https://astral.sh/uv/install.sh | sh",
      "[ -x .venv/bin/python ] || uv venv -q --python 3.12 .venv",
      'uv pip install -q --python .venv/bin/python -e ".[gcs]" "jax[tpu]"',
  ]
  return _gcloud(settings, "ssh", "--worker=all", f"--command={'; '.join(steps)}")


def train_command(sweep: Sweep, point: Point, root: str, settings: Settings) -> list[str]:
  """`jformer train` of `point` on every worker of the slice."""
  train = [".venv/bin/python", "-m", "jformer.main", *sweep.train_args(point, sweep.workdir(root, point))]
  return _gcloud(settings, "ssh", "--worker=all", f"--command=cd {CLONE_DIR} && {shell_join(train)}")


def fetch_command(sweep: Sweep, point: Point, root: str, settings: Settings) -> list[str]:
  """Copies the point's results, config and TensorBoard files from worker 0 into the local workdir."""
  local = sweep.workdir(root, point)
  remote = local if os.path.isabs(local) else os.path.join(CLONE_DIR, local)
  sources = [f"{settings.name}:{remote}/{item}" for item in (runs.RESULTS, "config.json", "tensorboard")]
  return _gcloud(settings, "scp", "--recurse", "--worker=0", *sources, local, named=False)


def point_commands(sweep: Sweep, point: Point, root: str, settings: Settings) -> list[list[str]]:
  """Train `point` on every worker, then fetch its results from worker 0, unless the root is a gs:// (or other
  object store) path that the workers wrote to directly."""
  train = [train_command(sweep, point, root, settings)]
  return train + [fetch_command(sweep, point, root, settings)] if paths.is_local(root) else train


def render(sweep: Sweep, root: str, settings: Settings, points: list[Point] | None = None) -> str:
  """Every command a run would execute, in order, with comments (what --dry_run prints)."""
  _check_base(sweep)
  points = list(sweep.points) if points is None else points
  lines = [f"# create the TPU VM unless `{shell_join(describe_command(settings))}` finds it:",
           shell_join(create_command(settings)),
           f"# install {settings.repo} at {settings.ref} on every worker:",
           shell_join(install_command(settings))]
  for number, point in enumerate(points, 1):
    fetch = ", then fetch its results" if paths.is_local(root) else ""
    lines += [f"# point {number}/{len(points)}: {point.name} (output in "
              f"{os.path.join(sweep.workdir(root, point), runs.LOG)}){fetch}:",
              *(shell_join(command) for command in point_commands(sweep, point, root, settings))]
  return "\n".join(lines) + "\n"


def _check_base(sweep: Sweep):
  if os.path.isabs(sweep.base.partition(":")[0]):
    raise SweepError(f"sweep '{sweep.name}': the tpu_vm backend runs BASE '{sweep.base}' inside the clone on the "
                     f"workers: give a path relative to the project root, e.g. configs/demo.py")


def run(sweep: Sweep, root: str, settings: Settings, *, dry_run: bool = False) -> int:
  """Runs (or with `dry_run` prints) the points not done here, one after another; returns how many failed."""
  pending = [p for p in sweep.points if runs.to_launch(sweep.workdir(root, p), p.steps)]
  if dry_run:
    print(render(sweep, root, settings, pending), end="", flush=True)
    return 0
  _check_base(sweep)
  require_tool("gcloud", "install the Google Cloud CLI (https://cloud.google.com/sdk/docs/install) and run "
               "`gcloud auth login`")
  if subprocess.run(describe_command(settings), capture_output=True).returncode:
    print(f"creating TPU VM {settings.name}: {shell_join(create_command(settings))}", flush=True)
    if subprocess.run(create_command(settings)).returncode:
      print(f"could not create TPU VM {settings.name}", flush=True)
      return len(pending)
  if subprocess.run(install_command(settings)).returncode:
    print(f"installing the project on {settings.name} failed", flush=True)
    return len(pending)
  failed = []
  for number, point in enumerate(pending, 1):
    workdir = sweep.workdir(root, point)
    try:
      with runs.claim(workdir):  # another launcher's point is skipped, untouched.
        if not runs.to_launch(workdir, point.steps):
          print(f"[{number}/{len(pending)}] {point.name}: {runs.status(workdir, point.steps)} by now, skipped",
                flush=True)
          continue
        print(f"[{number}/{len(pending)}] {point.name}: started (log: {os.path.join(workdir, runs.LOG)})", flush=True)
        code = runs.run_logged(point_commands(sweep, point, root, settings), workdir)
    except runs.Claimed as e:
      print(f"[{number}/{len(pending)}] {point.name}: run by another launcher ({e}), skipped", flush=True)
      continue
    print(f"[{number}/{len(pending)}] {point.name}: {'done' if code == 0 else f'FAILED ({code})'}", flush=True)
    if code:
      failed.append(point.name)
  if failed:
    print(f"{len(failed)} of {len(sweep.points)} points failed: {', '.join(failed)}", flush=True)
  return len(failed)
