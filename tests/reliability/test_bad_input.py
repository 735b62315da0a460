"""Bad input to the `jformer` commands: one line naming the problem and the fix, exit code 1, no traceback, and
nothing left behind (no workdir, config.json or tfds folder)."""

import io
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from helpers import REPO, tiny_overrides

from jformer import main


def flags(overrides: dict) -> list[str]:
  return [f"--config.{key}={value}" for key, value in overrides.items()]


def train_args(repo_root, workdir, corpus, **extra) -> list[str]:
  return ["train", f"--config={repo_root / 'configs' / 'small.py'}", f"--workdir={workdir}",
          *flags(tiny_overrides(corpus, **extra))]


def refused(argv) -> str:
  """The one-line error `jformer.main.main(argv)` exits with (exit code 1: `sys.exit(message)`)."""
  with pytest.raises(SystemExit) as exit_info:
    main.main([str(a) for a in argv])
  message = exit_info.value.code
  assert isinstance(message, str) and "\n" not in message, message
  return message


def copy_corpus(corpus, tmp_path):
  return shutil.copytree(corpus, tmp_path / "corpus")


@pytest.fixture(scope="module")
def trained_run(tiny_corpus, tmp_path_factory):
  """A tiny trained run (checkpoints at steps 1 and 2, vocabulary of 300 pieces)."""
  workdir = tmp_path_factory.mktemp("bad_input") / "run"
  main.main([str(a) for a in train_args(REPO, workdir, tiny_corpus, **{
      "train.steps": 2, "train.checkpoint_every": 1, "train.eval_every": 2, "train.bleu_examples": 2})])
  return workdir


def test_misaligned_data_names_the_files_and_line_counts_and_writes_nothing(repo_root, tiny_corpus, tmp_path):
  corpus = copy_corpus(tiny_corpus, tmp_path)
  with open(corpus / "valid.src", "a", encoding="utf-8") as f:
    f.write("one line too many\n")
  message = refused(train_args(repo_root, tmp_path / "run", corpus))
  assert message == (f"jformer train: error: misaligned split 'valid': {corpus / 'valid.src'} has 25 lines but "
                     f"{corpus / 'valid.tgt'} has 24; line i of one must translate line i of the other (fix or "
                     "regenerate the files).")
  assert not (tmp_path / "run").exists()


def test_an_empty_data_file_is_named(repo_root, tiny_corpus, tmp_path):
  corpus = copy_corpus(tiny_corpus, tmp_path)
  (corpus / "test.tgt").write_text("")
  message = refused(train_args(repo_root, tmp_path / "run", corpus))
  assert f"empty file(s) ['{corpus / 'test.tgt'}'] in split 'test'" in message and "data.path" in message
  assert not (tmp_path / "run").exists()


def test_missing_data_names_data_path(repo_root, tiny_corpus, tmp_path):
  message = refused(train_args(repo_root, tmp_path / "run", tmp_path / "no_such_corpus"))
  assert f"parallel text folder '{tmp_path / 'no_such_corpus'}' does not exist; set --config.data.path" in message
  corpus = copy_corpus(tiny_corpus, tmp_path)
  (corpus / "train.tgt").unlink()
  message = refused(train_args(repo_root, tmp_path / "run", corpus))
  assert "(data.path) lacks ['train.tgt[.gz]']" in message
  assert not (tmp_path / "run").exists()


def test_non_utf8_data_names_file_and_line(repo_root, tiny_corpus, tmp_path):
  corpus = copy_corpus(tiny_corpus, tmp_path)
  with open(corpus / "train.src", "ab") as f:
    f.write("Grüße\n".encode("latin-1"))
  with open(corpus / "train.tgt", "a", encoding="utf-8") as f:
    f.write("Grüße\n")
  message = refused(train_args(repo_root, tmp_path / "run", corpus))
  assert f"{corpus / 'train.src'} line 401 is not UTF-8 text" in message and "iconv" in message
  assert not (tmp_path / "run").exists()


@pytest.mark.integration
def test_missing_and_mismatched_vocabulary(repo_root, tiny_corpus, tmp_path, trained_run):
  message = refused(train_args(repo_root, tmp_path / "run", tiny_corpus, **{"data.vocab_path": tmp_path / "x.model"}))
  assert f"data.vocab_path {tmp_path / 'x.model'} does not exist" in message
  vocab = trained_run / "vocab" / "spm_300.model"
  message = refused(train_args(repo_root, tmp_path / "run", tiny_corpus,
                               **{"data.vocab_path": vocab, "model.vocab_size": 400}))
  assert message.endswith(f"data.vocab_path {vocab} has 300 pieces but model.vocab_size is 400; set "
                          "--config.model.vocab_size=300 or give a vocabulary of 400 pieces.")
  assert not (tmp_path / "run").exists()


def test_workdir_that_is_a_file(repo_root, tiny_corpus, tmp_path):
  workdir = tmp_path / "run"
  workdir.write_text("not a folder")
  message = refused(train_args(repo_root, workdir, tiny_corpus))
  assert message == (f"jformer train: error: --workdir {workdir} is a file, not a folder; give a folder path (new or "
                     "of an earlier run).")
  assert workdir.read_text() == "not a folder"


def test_read_only_workdir(repo_root, tiny_corpus, tmp_path):
  if os.geteuid() == 0:  # root writes through file modes: a folder that even root cannot write in, the kernel's.
    parent = "/sys/fs"
    if not os.path.isdir(parent) or _can_write(parent):
      pytest.skip("no read-only folder for root here")
    message = refused(train_args(repo_root, f"{parent}/run", tiny_corpus))
    assert message == (f"jformer train: error: --workdir {parent}/run is under /sys, the kernel's sysfs file system, "
                       "where no folder can be made; give a folder on a disk, e.g. --workdir=runs/demo.")
    return
  parent = tmp_path / "read_only"
  parent.mkdir(mode=0o555)
  message = refused(train_args(repo_root, f"{parent}/run", tiny_corpus))
  assert message.startswith(f"jformer train: error: --workdir {parent}/run cannot be written ({parent}: ")
  assert message.endswith("give a writable folder or fix its permissions.")


def _can_write(folder) -> bool:
  try:
    with tempfile.TemporaryFile(dir=folder):
      return True
  except OSError:
    return False


def translate(workdir, stdin: bytes, monkeypatch, capsys):
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
  main.main(["translate", f"--workdir={workdir}"])
  return capsys.readouterr().out


@pytest.mark.integration
def test_translate_refuses_empty_and_binary_input(trained_run, monkeypatch):
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8"))
  assert refused(["translate", f"--workdir={trained_run}"]) == (
      "jformer translate: error: no source lines in stdin; give one sentence per line.")
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Open the file\n\x7fELF\x02\x01\xff\x00\n"),
                                                     encoding="utf-8"))
  assert refused(["translate", f"--workdir={trained_run}"]) == (
      "jformer translate: error: stdin line 2 is not UTF-8 text (invalid start byte); give source sentences as UTF-8 "
      "text, one per line.")


@pytest.mark.integration
def test_translate_truncates_an_overlong_line_with_a_warning(trained_run, monkeypatch, capsys, caplog):
  out = translate(trained_run, b"Open the file\n" + b"word " * 200 + b"\n\n", monkeypatch, capsys)
  assert out.count("\n") == 3  # one translation per line, the empty line's empty.
  assert out.endswith("\n\n")
  assert ("1 source line(s) (2) longer than model.max_length=64 tokens: only their first 63 tokens are translated."
          in caplog.text)
  assert "read only" not in caplog.text  # Orbax's warning about the checkpoints opened read-only is filtered.


@pytest.mark.integration
def test_translate_a_workdir_without_checkpoints(trained_run, tmp_path, monkeypatch):
  workdir = tmp_path / "run"
  workdir.mkdir()
  shutil.copy(trained_run / "config.json", workdir)
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Open the file\n"), encoding="utf-8"))
  assert refused(["translate", f"--workdir={workdir}"]) == (
      f"jformer translate: error: no checkpoints in {workdir / 'checkpoints'}; train first (jformer train "
      f"--workdir={workdir}), or let the run reach its first train.checkpoint_every step.")


@pytest.mark.integration
def test_average_more_checkpoints_than_exist_names_last_and_keep_checkpoints(trained_run):
  message = refused(["average-checkpoints", f"--workdir={trained_run}", "--last=9"])
  assert message.endswith("has only 2 (steps [1, 2]); average at most 2 (jformer average-checkpoints --last=2), or "
                          "keep more checkpoints while training (--config.train.keep_checkpoints=9).")
  assert not (trained_run / "averaged").exists()


@pytest.mark.integration
def test_cli_bad_input_is_one_stderr_line_without_traceback(repo_root, tiny_corpus, tmp_path):
  """Through the real command (a subprocess): exit code 1, one line on stderr, the traceback only with --verbose."""
  argv = [sys.executable, "-m", "jformer.main",
          *map(str, train_args(repo_root, tmp_path / "run", tmp_path / "no_such_corpus"))]
  result = subprocess.run(argv, cwd=repo_root, capture_output=True, text=True, timeout=300)
  assert result.returncode == 1
  assert result.stderr.count("\n") == 1 and result.stderr.startswith("jformer train: error: parallel text folder")
  verbose = subprocess.run(argv + ["--verbose"], cwd=repo_root, capture_output=True, text=True, timeout=300)
  assert verbose.returncode == 1 and "Traceback" in verbose.stderr
  assert not (tmp_path / "run").exists()


def test_no_eta_before_a_timed_step(tmp_path, capsys):
  """A report that holds only the first (compiling, untimed) step shows no ETA, not one from 0 steps/s."""
  from jformer.train.progress import Progress

  progress = Progress(tmp_path, total_steps=1000, start_step=0)
  progress.step(100, timed=False)
  progress.report(1)
  first = capsys.readouterr().out
  assert first.rstrip().endswith("0.00 steps/s | 0 tok/s | ETA --"), first
  progress.step(100)
  progress.report(2)
  assert "ETA --" not in capsys.readouterr().out
  progress.close()
