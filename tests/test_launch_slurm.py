"""The SLURM backend against a real one-node SLURM (launch/testing/slurm_single_node.sh): a 2-point job array
runs to completion; a task killed with SIGKILL (scancel) is reported killed and resubmitted from its checkpoint.
Needs root (munged and slurmd run as root) and the Debian slurm/munge packages, which the script installs with
apt-get when missing (`.ci/run` installs them before the tests)."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from helpers import REPO, tiny_overrides
from launch import runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCRIPT = REPO / "launch" / "testing" / "slurm_single_node.sh"
BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "munged")
JOB_TIMEOUT_S = 600


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def slurm_env():
  """Starts a private one-node cluster (own directory, ports, munge key); yields the clients' environment."""
  if os.geteuid() != 0:
    pytest.skip("a single-node SLURM needs root (munged and slurmd run as root)")
  installed = all(shutil.which(b) for b in BINARIES)
  if not installed and not shutil.which("apt-get"):
    pytest.skip(f"SLURM is not installed ({', '.join(BINARIES)}) and there is no apt-get to install it")
  directory = f"/tmp/jformer-slurm-{os.getpid()}"
  env = {**os.environ, "SLURM_SN_DIR": directory, "SLURM_SN_CTLD_PORT": str(free_port()),
         "SLURM_SN_SLURMD_PORT": str(free_port()), "SLURM_CONF": f"{directory}/etc/slurm.conf"}
  start = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=1200)
  if start.returncode and not installed:
    pytest.skip(f"could not install SLURM with apt-get: {start.stderr[-2000:]}")
  try:
    assert start.returncode == 0, f"SLURM did not start:\n{start.stderr[-4000:]}"
    yield env
  finally:
    subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=300)
    shutil.rmtree(directory, ignore_errors=True)


def wait_for_job(job_id: str, env: dict):
  """Polls squeue until the job array has left the queue."""
  start = time.monotonic()
  while time.monotonic() - start < JOB_TIMEOUT_S:
    queued = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i %T"], env=env, capture_output=True,
                            text=True, timeout=30)
    if queued.returncode == 0 and not queued.stdout.strip():
      return
    time.sleep(2)
  pytest.fail(f"job {job_id} still queued or running after {JOB_TIMEOUT_S}s: {queued.stdout}")


def test_sweep_runs_as_a_slurm_job_array(slurm_env, tiny_corpus, tmp_path):
  sweep_file = tmp_path / "tiny_slurm.py"
  sweep_file.write_text(
      "from launch import sweep\n\n"
      f"BASE = 'configs/small.py'\nFIXED = {tiny_overrides(tiny_corpus)!r}\nSLURM = {{'time': '00:15:00'}}\n\n"
      "def get_sweep():\n  return sweep.axis('model.attention', ['dot_product', 'xla'])\n")
  root = tmp_path / "runs"
  launch = [sys.executable, "-m", "launch", f"--sweep={sweep_file}", "--backend=slurm", f"--root={root}"]
  submitted = subprocess.run(launch, cwd=REPO, env=slurm_env, capture_output=True, text=True, timeout=300)
  assert submitted.returncode == 0, submitted.stderr
  job_id = re.search(r"submitted job array (\d+) \(2 of 2 points\)", submitted.stdout).group(1)
  wait_for_job(job_id, slurm_env)

  folder = root / "tiny_slurm"
  for task, point in enumerate(("attention=dot_product", "attention=xla")):
    workdir = folder / point
    log = (workdir / runs.LOG).read_text()
    assert (workdir / runs.EXIT_CODE).read_text() == "0\n", log[-3000:]
    assert json.loads((workdir / runs.RESULTS).read_text())["step"] == 6
    # The job's multi-host environment: the allocation's first node, a port per array task, one process.
    assert re.search(rf"slurm job {job_id}_{task}: point {point} on \S+, 1 process\(es\), coordinator "
                     rf"\S+:{12355 + task}", log), log[:2000]
    assert "done: step 6" in log and not (workdir / runs.RUNNING_RECORD).exists()
    assert (folder / f"slurm-{job_id}_{task}.out").exists()

  again = subprocess.run(launch, cwd=REPO, env=slurm_env, capture_output=True, text=True, timeout=300)
  assert again.returncode == 0 and "all 2 points of 'tiny_slurm' are done or running; nothing to submit" in again.stdout


def test_killed_slurm_task_is_reported_and_resumed(slurm_env, tiny_corpus, tmp_path):
  fixed = tiny_overrides(tiny_corpus, **{"train.steps": 100_000, "train.checkpoint_every": 2,
                                         "train.eval_every": 100_000, "train.bleu_examples": 2})
  sweep_file = tmp_path / "kill_slurm.py"

  def write(fixed):
    sweep_file.write_text("from launch import sweep\n\n"
                          f"BASE = 'configs/small.py'\nFIXED = {fixed!r}\nSLURM = {{'time': '00:15:00'}}\n\n"
                          "def get_sweep():\n  return sweep.axis('model.attention', ['dot_product'])\n")

  write(fixed)
  root = tmp_path / "runs"
  workdir = root / "kill_slurm" / "attention=dot_product"
  launch = [sys.executable, "-m", "launch", f"--sweep={sweep_file}", "--backend=slurm", f"--root={root}"]
  submitted = subprocess.run(launch, cwd=REPO, env=slurm_env, capture_output=True, text=True, timeout=300)
  job_id = re.search(r"submitted job array (\d+)", submitted.stdout).group(1)
  start = time.monotonic()
  checkpoints = workdir / "checkpoints"
  while not checkpoints.exists() or not any(p.name.isdigit() for p in checkpoints.iterdir()):
    assert time.monotonic() - start < JOB_TIMEOUT_S, (workdir / runs.LOG).read_text()[-3000:]
    time.sleep(1)
  record = json.loads((workdir / runs.RUNNING_RECORD).read_text())
  assert record["slurm_job"] == f"{job_id}_0" and record["host"] == socket.gethostname()
  assert runs.status(str(workdir), 100_000) == runs.RUNNING
  subprocess.run(["scancel", "--full", "--signal=KILL", job_id], env=slurm_env, check=True, timeout=30)
  wait_for_job(job_id, slurm_env)
  start = time.monotonic()
  while runs._alive(record["pid"]):
    assert time.monotonic() - start < 60
    time.sleep(0.5)
  assert not (workdir / runs.EXIT_CODE).exists() and runs.status(str(workdir), 100_000) == runs.KILLED

  latest = max(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit())
  write({**fixed, "train.steps": latest + 2})
  again = subprocess.run(launch, cwd=REPO, env=slurm_env, capture_output=True, text=True, timeout=300)
  wait_for_job(re.search(r"submitted job array (\d+) \(1 of 1 points\)", again.stdout).group(1), slurm_env)
  log = (workdir / runs.LOG).read_text()
  assert (workdir / runs.EXIT_CODE).read_text() == "0\n", log[-3000:]
  assert f"resumed from step {latest}" in log
  assert json.loads((workdir / runs.RESULTS).read_text())["step"] == latest + 2
