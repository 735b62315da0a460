"""Issue 13, faults 4 and 5 on a workdir: a second `jformer train` job is refused while one runs (and a killed one
leaves no stuck lock); a restart or a command that loads the run with a changed config resumes on harmless keys
and refuses keys that define the run, naming them."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers import REPO, tiny_overrides
from jformer import checkpoint
from jformer import config as config_lib
from jformer import main
from jformer.train.loop import check_resume, train_and_evaluate
from jformer.train.workdir_lock import LOCK_FILE, WorkdirInUseError, hold


def load(corpus, **extra):
  return config_lib.load(REPO / "configs" / "small.py", tiny_overrides(corpus, **extra))


def wait_for(condition, process, seconds=240):
  deadline = time.monotonic() + seconds
  while not condition():
    assert process.poll() is None, f"the first train ended early:\n{process.communicate()[1][-3000:]}"
    assert time.monotonic() < deadline, "the first train did not get there in time"
    time.sleep(0.2)


HOLDER = """
import sys, time
from jformer.train.workdir_lock import hold
with hold(sys.argv[1]):
  print("held", flush=True)
  time.sleep(600)
"""


@pytest.mark.integration
def test_the_lock_names_its_holder_and_dies_with_it(tmp_path):
  holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], cwd=REPO, env=dict(
      os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline() == "held\n"
    with pytest.raises(WorkdirInUseError, match=f"^{tmp_path} is in use by another `jformer train` \\(pid "
                                                f"{holder.pid} on {os.uname().nodename} since 20"):
      with hold(tmp_path):
        pass
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
  with hold(tmp_path):  # kill -9 released it.
    assert (tmp_path / LOCK_FILE).read_text().startswith(f"pid {os.getpid()} ")
  with hold(tmp_path):  # and leaving the block released it too.
    pass


@pytest.mark.slow
def test_a_second_train_is_refused_and_a_killed_train_leaves_no_stuck_lock(tiny_corpus, tmp_path, capsys):
  workdir = tmp_path / "run"
  overrides = tiny_overrides(tiny_corpus, **{"train.steps": 10**6, "train.checkpoint_every": 2, "train.eval_every":
                                             10**6, "train.log_every": 10**6})
  first = subprocess.Popen(
      [sys.executable, "-m", "jformer.main", "train", "--config=configs/small.py", f"--workdir={workdir}",
       *(f"--config.{key}={value}" for key, value in overrides.items())],
      cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    wait_for(lambda: any(path.name.isdigit() for path in (workdir / "checkpoints").glob("*")), first)
    config_json = (workdir / "config.json").read_text()
    with pytest.raises(SystemExit) as stop:  # the second job, in this process: flock locks are per open file.
      main.main(["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={workdir}",
                 *(f"--config.{key}={value}" for key, value in {**overrides, "train.steps": 3}.items())])
    host = os.uname().nodename
    assert stop.value.code.startswith(f"jformer train: error: {workdir} is in use by another `jformer train` "
                                      f"(pid {first.pid} on {host} since 20")
    assert stop.value.code.endswith(f"; lock {workdir / LOCK_FILE}); wait for it to finish or stop it, or train in "
                                    "another --workdir")
    assert (workdir / "config.json").read_text() == config_json  # the refused job wrote nothing.
  finally:
    first.send_signal(signal.SIGKILL)
    first.communicate()
  assert first.returncode == -signal.SIGKILL
  with checkpoint.Checkpointer(workdir / "checkpoints", read_only=True) as saved:
    killed_at = saved.latest_step()
  assert killed_at >= 2
  capsys.readouterr()
  results = train_and_evaluate(load(tiny_corpus, **{**overrides, "train.steps": killed_at + 1}), workdir)
  assert f"resumed from step {killed_at} " in capsys.readouterr().out
  assert results["step"] == killed_at + 1
  assert (workdir / LOCK_FILE).read_text().startswith(f"pid {os.getpid()} on {host} since 20")


@pytest.fixture(scope="module")
def written_run(tiny_corpus, tmp_path_factory):
  """A workdir with the config.json of a 1-step run of the tiny config (all that the checks read); its text."""
  workdir = tmp_path_factory.mktemp("run")
  config_lib.write_run(load(tiny_corpus, **{"train.steps": 1}), workdir)
  return workdir, (workdir / "config.json").read_text()


HARMLESS = {"train.steps": 2, "train.log_every": 1, "train.eval_every": 2, "train.checkpoint_every": 1,
            "decode.method": "beam", "decode.beam_size": 2, "optimizer.learning_rate_scale": 0.5,
            "model.dropout_rate": 0.2, "data.eval_batch_size": 16}


def test_harmless_changes_are_taken_and_named(written_run, tiny_corpus, tmp_path, caplog):
  workdir, config_json = written_run
  (tmp_path / "config.json").write_text(config_json)
  check_resume(config_lib.run_settings(load(tiny_corpus, **HARMLESS)), tmp_path)
  config_lib.write_run(load(tiny_corpus, **HARMLESS), tmp_path)
  assert "train.steps 1 -> 2" in caplog.text and "model.dropout_rate 0.0 -> 0.2" in caplog.text
  written = json.loads((tmp_path / "config.json").read_text())
  assert (written["decode"]["beam_size"], written["train"]["steps"], written["model"]["dropout_rate"]) == (2, 2, 0.2)
  assert config_lib.load_run(workdir, {"decode.method": "beam", "decode.beam_size": "2", "model.dtype": "bfloat16"}
                             ).decode.beam_size == 2


@pytest.mark.slow
def test_harmless_changes_resume(tiny_corpus, tmp_path, capsys):
  train_and_evaluate(load(tiny_corpus, **{"train.steps": 1}), tmp_path)
  capsys.readouterr()
  results = train_and_evaluate(load(tiny_corpus, **HARMLESS), tmp_path)
  assert "resumed from step 1 " in capsys.readouterr().out
  assert results["step"] == 2


# One key per category of the identity keys: model shape, vocabulary, dataset and corpus, languages, tokenizer, data rows.
INCOMPATIBLE = {
    "model shape": ("model.d_model", 64, 32),
    "vocabulary size": ("model.vocab_size", 200, 300),
    "vocabulary file": ("data.vocab_path", "/tmp/other.model", ""),
    "dataset": ("data.dataset", "wmt14_translate/de-en", "parallel_text"),
    "languages": ("data.source_lang", "fr", "en"),
    "tokenizer": ("data.spm_max_sentences", 1000, 1_000_000),
    "row length": ("data.max_length", 16, 32),
}


@pytest.mark.parametrize("category", list(INCOMPATIBLE))
def test_incompatible_changes_are_refused_on_train_and_translate(written_run, tiny_corpus, category):
  workdir, config_json = written_run
  key, value, old = INCOMPATIBLE[category]
  named = f"{key}={value!r} (the run has {old!r})"
  with pytest.raises(ValueError) as refused:
    train_and_evaluate(load(tiny_corpus, **{key: value}), workdir)
  assert str(refused.value) == (f"{workdir} holds a run that was trained with other values of keys that define its "
                                f"parameters, vocabulary or data: {named}; change them back (see "
                                f"{workdir / 'config.json'}) or train in a new --workdir")
  for command in ("translate", "visualize-attention", "average-checkpoints"):
    extra = ["--text=Hello."] if command == "visualize-attention" else []
    with pytest.raises(SystemExit) as stop:
      main.main([command, f"--workdir={workdir}", *extra, f"--config.{key}={value}"])
    assert stop.value.code == (f"jformer {command}: error: the run in {workdir} was trained with other values of keys "
                               f"that define its parameters, vocabulary or data: {named}; drop those --config "
                               "overrides")
  assert (workdir / "config.json").read_text() == config_json


def test_the_corpus_path_is_refused_naming_both_paths(written_run, tiny_corpus, tmp_path):
  workdir, _ = written_run
  with pytest.raises(ValueError, match=f"data.path='{tmp_path}' \\(the run has '{tiny_corpus}'\\)"):
    train_and_evaluate(load(tiny_corpus, **{"data.path": str(tmp_path)}), workdir)


@pytest.fixture
def small_disk(tmp_path):
  """A 150 KiB tmpfs (mounting needs root, as CI runs; elsewhere the test is skipped)."""
  folder = tmp_path / "small_disk"
  folder.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=150k", "tmpfs", str(folder)], capture_output=True).returncode:
    pytest.skip("cannot mount a tmpfs here (needs root)")
  yield folder
  subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.integration
def test_a_full_disk_while_preparing_the_data_is_one_line_naming_the_folder(repo_root, tiny_corpus, small_disk):
  workdir = small_disk / "run"
  result = subprocess.run([sys.executable, "-m", "jformer.main", "train", f"--config={repo_root / 'configs' / 'small.py'}",
                           f"--workdir={workdir}", *[f"--config.{k}={v}" for k, v in tiny_overrides(tiny_corpus).items()]],
                          cwd=repo_root, capture_output=True, text=True, timeout=600)
  assert result.returncode == 1
  error = result.stderr.strip().splitlines()[-1]
  assert error.startswith(f"jformer train: error: no space left on the device of {workdir / 'tfds'} while preparing "
                          "the data (0.")
  assert error.endswith("free space there, or put the prepared data on another disk with "
                        "--config.data.data_dir=DIR; then rerun the same command")
  assert "Traceback" not in result.stderr
