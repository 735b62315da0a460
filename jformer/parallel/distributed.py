"""Multi-host start-up: `jax.distributed.initialize()` when the environment asks for it."""

from __future__ import annotations

import os

import jax

# Explicit settings (flags or environment) win over auto-detection; launch/ sets these under SLURM.
ENV_COORDINATOR = "JFORMER_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JFORMER_NUM_PROCESSES"
ENV_PROCESS_ID = "JFORMER_PROCESS_ID"


def initialize_distributed(coordinator_address: str = "", num_processes: int = 0, process_id: int = -1) -> bool:
  """Joins a multi-process JAX job when asked; returns True if it did.

  Order: explicit arguments, then `JFORMER_*` environment variables, then auto-detection of a SLURM job
  with several tasks or a Cloud TPU pod (jax's own cluster detection). A single process does nothing.
  On the CPU backend, cross-process collectives use gloo.
  """
  coordinator_address = coordinator_address or os.environ.get(ENV_COORDINATOR, "")
  num_processes = num_processes or int(os.environ.get(ENV_NUM_PROCESSES, "0"))
  process_id = process_id if process_id >= 0 else int(os.environ.get(ENV_PROCESS_ID, "-1"))
  explicit = num_processes > 1  # a coordinator address with one process is a single-process job.
  slurm = int(os.environ.get("SLURM_NTASKS", "1")) > 1
  tpu_pod = "TPU_WORKER_HOSTNAMES" in os.environ and "," in os.environ["TPU_WORKER_HOSTNAMES"]
  if not (explicit or slurm or tpu_pod):
    return False
  if jax.config.jax_platforms in (None, "", "cpu") or os.environ.get("JAX_PLATFORMS", "") == "cpu":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if explicit:
    if not coordinator_address or num_processes < 1 or process_id < 0:
      raise ValueError("multi-host needs all of coordinator address, number of processes and process id; got "
                       f"{coordinator_address!r}, {num_processes}, {process_id} (flags --coordinator_address, "
                       f"--num_processes, --process_id or env {ENV_COORDINATOR}, {ENV_NUM_PROCESSES}, "
                       f"{ENV_PROCESS_ID})")
    jax.distributed.initialize(coordinator_address, num_processes, process_id)
  else:
    jax.distributed.initialize()
  return True


def is_chief() -> bool:
  """True on process 0, the one that writes logs, summaries and results."""
  return jax.process_index() == 0


def say(message: str):
  """Prints on process 0 only (the console's progress lines, results and warnings a user should see)."""
  if is_chief():
    print(message, flush=True)
