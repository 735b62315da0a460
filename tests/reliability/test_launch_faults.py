"""Launch faults and bad input (issue 13): a sweep point killed with SIGKILL or lost with its node is reported
as such and resumed by a relaunch; a sweep with an invalid point and a SLURM launch without `sbatch` are refused
with one line and exit status 2 before anything runs."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers import tiny_overrides
from launch import cli, report, runs

POINT = "attention=dot_product"


def write_sweep(path, fixed, points='sweep.axis("model.attention", ["dot_product"])'):
  path.write_text(f"from launch import sweep\n\nBASE = 'configs/small.py'\nFIXED = {fixed!r}\n\n"
                  f"def get_sweep():\n  return {points}\n")
  return path


def checkpoint_steps(workdir) -> list[int]:
  """The steps of the finished checkpoints in `workdir` (Orbax names a step's folder by its number once saved)."""
  folder = workdir / "checkpoints"
  return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def report_status(capsys, sweep_file, root) -> str:
  """The status column of the report's only row."""
  capsys.readouterr()
  assert report.main([f"--sweep={sweep_file}", f"--root={root}"]) == 0
  header, _, row = capsys.readouterr().out.splitlines()[:3]
  return dict(zip(header.split(" | "), row.split(" | ")))["status"]


@pytest.mark.slow  # Two training processes (about 60-90 s on 2 busy CPU cores).
def test_sigkilled_point_is_reported_killed_and_resumes_on_relaunch(repo_root, tiny_corpus, tmp_path, monkeypatch,
                                                                    capsys):
  monkeypatch.chdir(repo_root)
  root = tmp_path / "runs"
  endless = tiny_overrides(tiny_corpus, **{"train.steps": 100_000, "train.checkpoint_every": 2,
                                           "train.eval_every": 100_000, "train.bleu_examples": 2})
  sweep_file = write_sweep(tmp_path / "kill.py", endless)
  workdir = root / "kill" / POINT
  with open(tmp_path / "launch.out", "w") as out:
    launcher = subprocess.Popen([sys.executable, "-m", "launch", f"--sweep={sweep_file}", f"--root={root}"],
                                cwd=repo_root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
  try:
    deadline = time.monotonic() + 240
    while not (checkpoint_steps(workdir) and (workdir / runs.RUNNING_RECORD).exists()):
      assert launcher.poll() is None, (tmp_path / "launch.out").read_text()
      assert time.monotonic() < deadline, "no checkpoint after 240 s"
      time.sleep(0.2)
    assert runs.status(str(workdir), 100_000) == runs.RUNNING
    record = json.loads((workdir / runs.RUNNING_RECORD).read_text())
    assert record["host"] == socket.gethostname() and record["pid"] != launcher.pid  # The training process.
  finally:
    os.killpg(launcher.pid, signal.SIGKILL)  # The launcher and its training process, as the OOM killer would.
    launcher.wait()
  deadline = time.monotonic() + 30
  while runs._alive(record["pid"]):  # The training process is reaped by init.
    assert time.monotonic() < deadline
    time.sleep(0.1)

  assert not (workdir / runs.EXIT_CODE).exists()  # Nothing recorded an exit status: it was "running" before.
  assert runs.status(str(workdir), 100_000) == runs.KILLED
  assert report_status(capsys, sweep_file, root) == "killed"

  # The relaunch resumes the killed point from its latest checkpoint (a harmless change: fewer steps).
  latest = checkpoint_steps(workdir)[-1]
  write_sweep(sweep_file, {**endless, "train.steps": latest + 2})
  assert cli.main([f"--sweep={sweep_file}", f"--root={root}"]) == 0
  assert f"{POINT}: started" in capsys.readouterr().out
  assert f"resumed from step {latest}" in (workdir / runs.LOG).read_text()
  assert json.loads((workdir / runs.RESULTS).read_text())["step"] == latest + 2
  assert not (workdir / runs.RUNNING_RECORD).exists() and (workdir / runs.EXIT_CODE).read_text() == "0\n"
  assert report_status(capsys, sweep_file, root) == "done"


def test_point_with_a_stale_heartbeat_is_lost_and_relaunched(repo_root, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(repo_root)
  root = tmp_path / "runs"
  sweep_file = write_sweep(tmp_path / "nodes.py", {"train.steps": 5},
                           'sweep.axis("model.attention", ["dot_product", "xla"])')
  now = time.time()
  for point, heartbeat in (("attention=dot_product", now - runs.LOST_AFTER_S - 5), ("attention=xla", now - 5)):
    workdir = root / "nodes" / point
    workdir.mkdir(parents=True)
    (workdir / runs.LOG).write_text("=== training on node-17\n")
    (workdir / runs.RUNNING_RECORD).write_text(json.dumps({"host": "node-17", "pid": 4242, "heartbeat": heartbeat}))
  lost, running = (str(root / "nodes" / p) for p in ("attention=dot_product", "attention=xla"))
  assert runs.status(lost, 5) == runs.LOST and runs.status(running, 5) == runs.RUNNING
  # Exactly at the timeout it still runs; one second past it, it is lost.
  assert runs.status(running, 5, now=now - 5 + runs.LOST_AFTER_S) == runs.RUNNING
  assert runs.status(running, 5, now=now - 4 + runs.LOST_AFTER_S) == runs.LOST

  assert report.main([f"--sweep={sweep_file}", f"--root={root}"]) == 0
  table = capsys.readouterr().out
  assert "| attention=dot_product | dot_product | lost |" in table and "| attention=xla | xla | running |" in table

  # A relaunch starts the lost point again and leaves the one whose node still beats alone.
  assert cli.main([f"--sweep={sweep_file}", f"--root={root}", "--dry_run"]) == 0
  out = capsys.readouterr().out
  assert f"--workdir={lost} " in out and f"--workdir={running} " not in out
  assert f"attention=xla: still running ({running}/{runs.RUNNING_RECORD}), skipped" in out


def test_slurm_point_that_left_the_queue_is_lost(tmp_path, monkeypatch):
  """A login node sees a task whose node died as lost at once, if squeue no longer lists its job."""
  workdir = tmp_path / "point"
  workdir.mkdir()
  (workdir / runs.RUNNING_RECORD).write_text(json.dumps(
      {"host": "node-17", "pid": 4242, "heartbeat": time.time() - 5, "slurm_job": "77_1"}))
  squeue = tmp_path / "bin" / "squeue"
  squeue.parent.mkdir()
  monkeypatch.setenv("PATH", f"{squeue.parent}{os.pathsep}{os.environ['PATH']}")
  for answer, expected in (("echo RUNNING", runs.RUNNING), ("true", runs.LOST),
                           ("echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1", runs.LOST),
                           ("echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1",
                            runs.RUNNING)):  # No answer: the fresh heartbeat decides.
    squeue.write_text(f"#!/bin/sh\n[ \"$*\" = '-h -j 77_1 -o %T' ] || exit 9\n{answer}\n")
    squeue.chmod(0o755)
    assert runs.status(str(workdir), 5) == expected, answer


def launch_command(tmp_path, sweep_file, *args, path=None):
  """`jformer launch` as a user types it, in a subprocess; returns the CompletedProcess."""
  env = {**os.environ, "PATH": path if path is not None else os.environ["PATH"]}
  return subprocess.run([sys.executable, "-m", "jformer.main", "launch", f"--sweep={sweep_file}",
                         f"--root={tmp_path / 'runs'}", *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.integration
def test_slurm_without_sbatch_is_one_line(repo_root, tmp_path, monkeypatch):
  monkeypatch.chdir(repo_root)
  sweep_file = write_sweep(tmp_path / "nosbatch.py", {"train.steps": 5})
  bare = tmp_path / "bin"  # A PATH with python but no sbatch.
  bare.mkdir()
  os.symlink(sys.executable, bare / "python")
  launched = launch_command(tmp_path, sweep_file, "--backend=slurm", path=str(bare))
  assert launched.returncode == 1, launched.stderr
  assert launched.stderr.strip().splitlines() == [
      "launch: error: `sbatch` is not on PATH: run on a SLURM login node, or use --backend=local (to try SLURM on "
      "one machine: launch/testing/slurm_single_node.sh)"]
  assert not (tmp_path / "runs").exists()  # No job script left behind.


def test_tpu_vm_without_gcloud_is_one_line(repo_root, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(repo_root)
  sweep_file = write_sweep(tmp_path / "tpu.py", {"train.steps": 5})
  sweep_file.write_text(sweep_file.read_text() + "\nTPU = {'name': 'v', 'zone': 'z', 'accelerator_type': 'v4-8', "
                        "'repo': 'https://example.com/j.git', 'ref': 'abc'}\n")
  monkeypatch.setenv("PATH", str(tmp_path))
  assert cli.main([f"--sweep={sweep_file}", "--backend=tpu_vm", f"--root={tmp_path / 'runs'}"]) == 1
  assert capsys.readouterr().err == ("launch: error: `gcloud` is not on PATH: install the Google Cloud CLI "
                                     "(https://cloud.google.com/sdk/docs/install) and run `gcloud auth login`\n")
  assert not (tmp_path / "runs").exists()


@pytest.mark.integration
def test_sweep_with_an_invalid_point_runs_nothing(repo_root, tmp_path, monkeypatch):
  monkeypatch.chdir(repo_root)
  sweep_file = write_sweep(tmp_path / "typo.py", {"train.steps": 5},
                           '[{"model.attention": "xla"}, {"model.num_head": 4}]')
  launched = launch_command(tmp_path, sweep_file)
  assert launched.returncode == 1
  assert launched.stderr.strip().splitlines() == [
      "launch: error: sweep 'typo': point 1 'num_head=4' {'model.num_head': 4}: unknown config key "
      "'model.num_head'; did you mean 'model.num_heads'?"]
  assert "Traceback" not in launched.stdout and not (tmp_path / "runs").exists()


def test_sweep_with_a_wrong_value_type_runs_nothing(repo_root, tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(repo_root)
  sweep_file = write_sweep(tmp_path / "value.py", {}, '[{"model.attention": "xla"}, {"train.steps": "seven"}]')
  assert cli.main([f"--sweep={sweep_file}", f"--root={tmp_path / 'runs'}"]) == 1
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith(
      "launch: error: sweep 'value': point 1 'steps=seven' {'train.steps': 'seven'}: config key 'train.steps' is a int")
  assert not (tmp_path / "runs").exists()
