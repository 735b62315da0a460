"""`python -m launch` (also `jformer launch`): expand a sweep file, validate every point, run it on a backend.

    python -m launch --sweep=configs/sweeps/attention_variants.py [--backend=local|slurm|tpu_vm] [--dry_run]
        [--root=runs] [--parallel=N] [--nodes=N --gpus_per_node=N --time=T --partition=P --account=A]
        [--tpu_name=NAME --zone=ZONE --accelerator_type=TYPE]

Every point runs in `<root>/<sweep>/<point>/`; `python -m launch.report --sweep=...` gathers the results.
"""

from __future__ import annotations

import argparse
import sys

from launch import sweep as sweep_lib
from launch.backends import local, slurm, tpu_vm

BACKEND_FLAGS = {
    "slurm": ("nodes", "gpus_per_node", "time", "partition", "account"),
    "tpu_vm": ("tpu_name", "zone", "accelerator_type"),
}


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m launch", description=__doc__.split("\n")[0],
                              epilog="SLURM and TPU settings default to the sweep file's SLURM = {...} / TPU = {...}.")
  p.add_argument("--sweep", required=True, help="sweep file, e.g. configs/sweeps/attention_variants.py")
  p.add_argument("--backend", default="local", choices=["local", "slurm", "tpu_vm"], help="where the points run")
  p.add_argument("--root", default="runs", help="folder for <sweep>/<point>/ workdirs (default: runs)")
  p.add_argument("--parallel", type=int, default=None,
                 help="points running at once: local (default 1), slurm (array throttle, default unlimited)")
  p.add_argument("--dry_run", action="store_true", help="print what would run or be submitted; run nothing")
  group = p.add_argument_group("slurm")
  group.add_argument("--nodes", type=int, help="nodes per point")
  group.add_argument("--gpus_per_node", type=int, help="GPUs per node (0: none requested)")
  group.add_argument("--time", help="time limit per point, e.g. 04:00:00")
  group.add_argument("--partition", help="SLURM partition")
  group.add_argument("--account", help="SLURM account")
  group = p.add_argument_group("tpu_vm")
  group.add_argument("--tpu_name", help="TPU VM name")
  group.add_argument("--zone", help="TPU zone, e.g. us-central2-b")
  group.add_argument("--accelerator_type", help="slice type, e.g. v4-32 (used when the VM is created)")
  return p


def main(argv: list[str] | None = None) -> int:
  """Runs the command; returns the exit status (0: all points done, submitted or printed)."""
  args = parser().parse_args(argv)
  for backend, flags in BACKEND_FLAGS.items():
    given = [f"--{flag}" for flag in flags if getattr(args, flag) is not None]
    if given and args.backend != backend:
      return _error(f"{', '.join(given)} apply to --backend={backend}, not --backend={args.backend}")
  if args.backend == "tpu_vm" and args.parallel is not None:
    return _error("--parallel does not apply to --backend=tpu_vm: its points run one after another on one slice")
  try:
    sweep = sweep_lib.load(args.sweep, backend=_platform(args.backend))
    print(f"sweep '{sweep.name}': {len(sweep.points)} points on {sweep.base}, all valid", flush=True)
    if args.backend == "local":
      failed = local.run(sweep, args.root, parallel=args.parallel or 1, dry_run=args.dry_run)
    elif args.backend == "slurm":
      settings = slurm.settings(sweep, **{flag: getattr(args, flag) for flag in BACKEND_FLAGS["slurm"]})
      failed = slurm.run(sweep, args.root, settings, parallel=args.parallel, dry_run=args.dry_run)
    else:
      settings = tpu_vm.settings(sweep, name=args.tpu_name, zone=args.zone, accelerator_type=args.accelerator_type)
      failed = tpu_vm.run(sweep, args.root, settings, dry_run=args.dry_run)
  except (sweep_lib.SweepError, ValueError) as e:
    return _error(str(e), status=1)
  return 1 if failed else 0


def _platform(backend: str) -> str | None:
  """The JAX backend the points of `backend` run on, which validation checks attention kernels against
  (`jformer.config.validate`): this machine's for local points, a TPU's on a TPU VM, not known on a SLURM cluster
  (its nodes may have GPUs or not)."""
  from jformer import config as config_lib  # Imports jax: only when a sweep is loaded.

  return {"local": config_lib.THIS_MACHINE, "slurm": None, "tpu_vm": "tpu"}[backend]


def _error(message: str, status: int = 2) -> int:
  """Prints the one-line error; returns `status`: 2 for flags that do not go together (usage), 1 for a sweep file,
  point or backend setting that is wrong (input), as `jformer` does (docs/reliability.md)."""
  print(f"launch: error: {message}", file=sys.stderr)
  return status
