"""Checkpoint faults injected for real (issue 13, faults 2 and 3): corrupted, truncated or incomplete checkpoints are
detected by their sha256 manifest and skipped; a full disk or SIGKILL during an asynchronous save keeps the previous
checkpoint intact and the rerun resumes exactly.

One tiny run (steps 3 and 6 saved) is trained once per module; each test works on a copy of it.
"""

import errno
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from etils import epath

from helpers import REPO, tiny_overrides
from jformer import checkpoint, main
from jformer import config as config_lib
from jformer.checkpoint import integrity
from jformer.train.loop import train_and_evaluate


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_corpus):
  """A finished 6-step run with checkpoints 3 and 6."""
  workdir = tmp_path_factory.mktemp("trained") / "run"
  train_and_evaluate(config_lib.load(REPO / "configs" / "small.py", tiny_overrides(tiny_corpus)), str(workdir))
  return workdir


@pytest.fixture
def run(trained, tmp_path):
  """A copy of the trained run to damage."""
  return shutil.copytree(trained, tmp_path / "run")


def train_args(workdir, corpus, **extra):
  return (["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={workdir}"]
          + [f"--config.{k}={v}" for k, v in tiny_overrides(corpus, **extra).items()])


def params_of(workdir, step):
  with checkpoint.Checkpointer(checkpoint.checkpoints_dir(workdir), read_only=True) as ckpt:
    return ckpt.restore_params(step)


def assert_same_params(a, b):
  import jax

  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, atol=1e-6)


def biggest_file(folder):
  """The largest file of a checkpoint folder (an array data file)."""
  files = [path for path in pathlib.Path(folder).rglob("*") if path.is_file() and path.name != integrity.MANIFEST]
  return max(files, key=lambda path: path.stat().st_size)


def damage(folder, how):
  """Flips 16 bytes in the middle of, removes the second half of, or deletes the folder's largest file."""
  path = biggest_file(folder)
  data = bytearray(path.read_bytes())
  if how == "flip":
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    path.write_bytes(bytes(data))
  elif how == "truncate":
    path.write_bytes(bytes(data[:len(data) // 2]))
  else:
    path.unlink()


def warnings_about(caplog, text):
  return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and text in r.getMessage()]


@pytest.mark.integration
@pytest.mark.parametrize("how", ["flip", "truncate", "delete"])
def test_corrupt_newest_step_is_detected_and_skipped(how, run, trained, caplog):
  damage(checkpoint.checkpoints_dir(run) / "6", how)
  with caplog.at_level(logging.WARNING):
    assert_same_params(params_of(run, None), params_of(trained, 3))
  [warning] = warnings_about(caplog, "corrupt checkpoint")
  problem = {"flip": "does not match its sha256", "truncate": "bytes, not", "delete": "is missing"}[how]
  assert "step 6 (file " in warning and problem in warning and "restoring step 3 instead" in warning


@pytest.mark.integration
def test_corrupt_newest_step_falls_back_and_resumes_exactly(run, trained, tiny_corpus, caplog, capsys):
  checkpoints = checkpoint.checkpoints_dir(run)
  damage(checkpoints / "6", "flip")
  results = run / "results.json"  # the run died before its final test (a finished run run again does nothing).
  results.write_text(json.dumps({**json.loads(results.read_text()), "finished": False}))
  with caplog.at_level(logging.WARNING):
    main.main(train_args(run, tiny_corpus))
  assert "resumed from step 3" in capsys.readouterr().out
  [warning] = warnings_about(caplog, "corrupt checkpoint")  # one warning, naming the bad step and what is wrong.
  assert "step 6 (file " in warning and "restoring step 3 instead" in warning
  assert (checkpoints / "6.corrupt").is_dir()  # set aside, not deleted.
  assert integrity.verify(checkpoints / "6") is None  # step 6 saved again, with a manifest.
  assert_same_params(params_of(run, 6), params_of(trained, 6))


@pytest.mark.integration
def test_every_step_corrupt_is_one_clear_line(run, tiny_corpus):
  checkpoints = checkpoint.checkpoints_dir(run)
  damage(checkpoints / "3", "flip")
  damage(checkpoints / "6", "delete")
  with pytest.raises(SystemExit) as exit_info:
    main.main(train_args(run, tiny_corpus, **{"train.steps": 9}))  # asks for more steps: restores.
  message = exit_info.value.code  # sys.exit(str): printed on stderr, exit status 1.
  assert isinstance(message, str) and "\n" not in message
  assert message.startswith(f"jformer train: error: no valid checkpoint in {checkpoints}: step 6 (file ")
  assert "step 3 (file " in message and "does not match its sha256" in message and "start the run over" in message
  assert sorted(path.name for path in checkpoints.iterdir()) == ["3", "6"]  # nothing moved or deleted.


@pytest.mark.integration
def test_translate_and_averaging_refuse_corrupt_params(run, tiny_corpus, tmp_path, caplog, capsys):
  source = tmp_path / "source.txt"
  source.write_text("Save the file before closing.\n")
  translate = ["translate", f"--workdir={run}", f"--input={source}"]
  main.main(["average-checkpoints", f"--workdir={run}", "--last=2"])
  damage(checkpoint.averaged_dir(run), "flip")
  with pytest.raises(SystemExit, match=r"jformer translate: error: the params checkpoint .*averaged is corrupt: file "):
    main.main(translate)

  damage(checkpoint.checkpoints_dir(run) / "6", "flip")
  with pytest.raises(SystemExit, match=r"error: checkpoint 6 in .* is corrupt: file .* does not match its sha256"):
    main.main(translate + ["--checkpoint=6"])
  with pytest.raises(SystemExit, match=r"jformer average-checkpoints: error: checkpoint 6 in .* is corrupt"):
    main.main(["average-checkpoints", f"--workdir={run}", "--last=2"])
  capsys.readouterr()
  with caplog.at_level(logging.WARNING):
    main.main(translate + ["--checkpoint=latest"])  # the newest valid step: 3, after one warning.
  assert len(capsys.readouterr().out.splitlines()) == 1
  [warning] = warnings_about(caplog, "corrupt checkpoint")
  assert "step 6" in warning and "restoring step 3" in warning and "moved" not in warning  # read-only: untouched.


def test_non_finite_params_are_refused(tmp_path):
  params = {"w": np.array([1.0, np.nan, 2.0], np.float32), "b": np.zeros(2, np.float32)}
  checkpoint.save_params(tmp_path / "params", params)  # a valid manifest: only the values are wrong.
  with pytest.raises(checkpoint.CorruptCheckpointError, match=r"non-finite values in params leaf \['w'\] \(1 of 3\)"):
    checkpoint.load_params(tmp_path / "params")
  with checkpoint.Checkpointer(tmp_path / "ckpt", async_save=False) as ckpt:
    ckpt.save(1, {"params": params, "step": np.int32(1)}, force=True)
    with pytest.raises(ValueError, match=r"checkpoint 1 in .* holds non-finite values in params leaf \['w'\]"):
      ckpt.restore_params()


@pytest.mark.integration
def test_step_without_manifest_is_restored_with_a_warning(run, trained, caplog):
  (checkpoint.checkpoints_dir(run) / "6" / integrity.MANIFEST).unlink()  # as saved by jformer before manifests.
  with caplog.at_level(logging.WARNING):
    assert_same_params(params_of(run, None), params_of(trained, 6))
  [warning] = warnings_about(caplog, "has no MANIFEST")
  assert warning.startswith("checkpoint 6 in ") and "unverified" in warning


def stopped_at_step_3(run):
  """`run` as a 6-step run looks after stopping right after saving step 3."""
  shutil.rmtree(checkpoint.checkpoints_dir(run) / "6")
  (run / "results.json").unlink()


@pytest.mark.slow  # ~70 s on 2 busy cores: two training runs.
def test_disk_full_while_saving_keeps_the_previous_step_and_resumes(run, trained, tiny_corpus, monkeypatch, capsys):
  stopped_at_step_3(run)
  checkpoints = checkpoint.checkpoints_dir(run)
  path_type = type(epath.Path(checkpoints))
  write_text = path_type.write_text

  def disk_full(self, *args, **kwargs):  # every file write into checkpoint 6 fails, as on a full disk.
    if "6.orbax-checkpoint-tmp" in os.fspath(self):
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(self))
    return write_text(self, *args, **kwargs)

  monkeypatch.setattr(path_type, "write_text", disk_full)
  with pytest.raises(SystemExit) as exit_info:
    main.main(train_args(run, tiny_corpus))
  assert exit_info.value.code == (
      f"jformer train: error: could not write checkpoint 6 to {checkpoints}: No space left on device. The steps "
      "saved before it are intact ([3]); free space (or fix the folder) and rerun the same command to resume from "
      "step 3.")
  assert integrity.verify(checkpoints / "3") is None and not (checkpoints / "6").exists()
  monkeypatch.undo()
  main.main(train_args(run, tiny_corpus))
  assert "resumed from step 3" in capsys.readouterr().out
  assert_same_params(params_of(run, 6), params_of(trained, 6))


@pytest.mark.slow  # ~80 s on 2 busy cores: a training process killed, then a training run.
def test_sigkill_during_an_async_save_resumes_exactly(run, trained, tiny_corpus, tmp_path, capsys):
  stopped_at_step_3(run)
  saving = tmp_path / "saving"
  # The writer of checkpoint 6's data item signals, then hangs: the process is killed with the save half done.
  driver = textwrap.dedent(f"""
      import pathlib, sys, time
      from grain import checkpoint
      save = checkpoint.CheckpointHandler.save
      def hang(self, directory, *args, **kwargs):
        if "6.orbax-checkpoint-tmp" in str(directory):
          pathlib.Path({str(saving)!r}).write_text("saving")
          time.sleep(600)
        return save(self, directory, *args, **kwargs)
      checkpoint.CheckpointHandler.save = hang
      from jformer import main
      main.main(sys.argv[1:])
      """)
  process = subprocess.Popen([sys.executable, "-c", driver] + train_args(run, tiny_corpus), cwd=REPO,
                             env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  try:
    deadline = time.monotonic() + 300
    while not saving.exists() and process.poll() is None and time.monotonic() < deadline:
      time.sleep(0.1)
    assert saving.exists(), f"the save of step 6 never started (exit status {process.poll()})"
  finally:
    process.kill()
    process.wait()
  checkpoints = checkpoint.checkpoints_dir(run)
  assert sorted(path.name for path in checkpoints.iterdir()) == ["3", "6.orbax-checkpoint-tmp"]
  main.main(train_args(run, tiny_corpus))
  assert "resumed from step 3" in capsys.readouterr().out
  assert sorted(path.name for path in checkpoints.iterdir()) == ["3", "6"]  # the half-written step cleaned up.
  assert_same_params(params_of(run, 6), params_of(trained, 6))
