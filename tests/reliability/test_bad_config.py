"""Bad config input through the real `jformer` command: one line naming the problem and the fix, exit status 1
(2 for command-line usage), no traceback unless --verbose, and nothing written (no workdir, no sweep root).

Most cases call `jformer.main.main` in-process and report its SystemExit as Python does (a string: printed on
stderr, status 1); two run `python -m jformer.main` as a subprocess to check that end to end.
"""

import os
import subprocess
import sys

import pytest
from helpers import assert_one_line_error, run_cli

DEMO = "configs/small.py"


@pytest.fixture
def project(repo_root, tmp_path, monkeypatch):
  """The project root as working directory (configs/ resolve); `tmp_path` must stay as the test left it."""
  monkeypatch.chdir(repo_root)
  return tmp_path


def train_argv(tmp_path, *overrides, config=DEMO):
  return ["train", f"--config={config}", f"--workdir={tmp_path / 'run'}", *overrides]


@pytest.mark.parametrize("overrides, fragments", [
    # Unknown keys, the nearest known one suggested.
    (["--config.train.stpes=5"], ["unknown config key 'train.stpes'", "did you mean 'train.steps'?"]),
    (["--config.trian.steps=5"], ["unknown config key 'trian'", "did you mean 'train'?"]),
    # Wrong value types, with an example of the right one.
    (["--config.train.steps=abc"], ["config key 'train.steps' is a int; got 'abc' (str)",
                                    "give e.g. train.steps=600"]),
    (["--config.model.d_model=1e3"], ["'model.d_model' is a int; got 1000.0 (float)", "model.d_model=256"]),
    (["--config.model.share_embeddings=maybe"],
     ["'model.share_embeddings' is a bool; got 'maybe' (use true or false)"]),
    (["--config.model.attention_options=abc"], ["'model.attention_options' is a group; give a dict"]),
    (["--config.model.attention=chunked", "--config.model.attention_options.query_chunk_size=abc"],
     ["attention variant 'chunked' needs a positive int query_chunk_size, got 'abc'"]),
    (["--config.model.positional=relative", "--config.model.positional_options.num_buckets=2.5"],
     ["positional encoding 'relative' needs a positive int num_buckets, got 2.5"]),
    (["--config.model.attention=local", "--config.model.attention_options.window=3"],
     ["attention variant 'local' has no option(s) ['window']; its options are ['window_size']"]),
    # Unknown registry names, the known ones listed.
    (["--config.model.attention=magic"],
     ["unknown attention variant 'magic'; known: ['additive',", "--config.imports"]),
    (["--config.model.positional=fourier"], ["unknown positional encoding 'fourier'; known: ['alibi',"]),
    (["--config.data.dataset=wmt99"], ["unknown dataset 'wmt99'; known: ['induction', 'listops', 'lm1b', 'mqar', 'parallel_text', 'selective_copy', 'text', 'wiki40b/*', 'wmt*_translate/*']"]),
    # Shapes that do not divide.
    (["--config.model.num_heads=3"], ["d_model=256 is not divisible by num_heads=3"]),
    (["--config.model.num_kv_heads=3"], ["num_kv_heads=3 does not divide num_heads=4"]),
    (["--config.train.steps=-3"], ["train.steps=-3 must be at least 1"]),
    (["--config.train.grad_accumulation_steps=0"], ["train.grad_accumulation_steps=0 must be at least 1"]),
    # A sequence split (context parallelism) that the mode, the rows or the attention cannot take.
    (["--config.parallel.sequence=2", "--config.parallel.mode=pmap"],
     ["parallel.sequence=2 splits each row's tokens over the device mesh, which parallel.mode='pmap' does not use"]),
    (["--config.parallel.sequence=3", "--config.model.positional=alibi"],
     ["data.max_length=64 is not a multiple of it", "cannot take with model.positional='alibi'; use rotary"]),
    (["--config.parallel.sequence=2", "--config.imports=tests/plugins/learned_alibi.py",
      "--config.model.attention=learned_alibi"],
     ["attention ['learned_alibi'] reads captured tensors or absolute positions that a share of the row does not "
      "hold"]),
    # A plug-in module that does not exist.
    (["--config.imports=no_such_package.variants"], ["config.imports: no module 'no_such_package.variants'",
                                                     "give a module on the Python path or a file path ending in .py"]),
])
def test_bad_override_is_one_line_and_writes_nothing(project, capsys, overrides, fragments, scratch_registries):
  status, err = run_cli(train_argv(project, *overrides), capsys)
  assert_one_line_error(status, err, "jformer train: error: ", *fragments)
  assert list(project.iterdir()) == []  # No workdir, no config.json, no tfds folder.


def test_typo_in_config_file(project, repo_root, capsys):
  config = project / "typo.py"
  config.write_text((repo_root / DEMO).read_text().replace("config.train.steps = 600", "config.train.stpes = 5"))
  status, err = run_cli(train_argv(project, config=config), capsys)
  assert_one_line_error(status, err, f"config file '{config}': unknown config key 'train.stpes'",
                        "did you mean 'train.steps'?")
  assert list(project.iterdir()) == [config]


# Line 6, inside get_config(), looks up a key that is not there.
RAISES_IN_GET_CONFIG = """from jformer.config import base_config
SIZES = {"wmt16": 32000}


def get_config():
  vocab_size = SIZES["wmt14"]
  return base_config()
"""


@pytest.mark.parametrize("text, fragments", [
    (None, ["does not exist (pass e.g. --config=configs/demo.py)"]),
    ("from jformer.config import base_config\n\n\ndef get_config(:\n  return base_config()\n",
     ["does not parse: line 4: ", "(fix the Python syntax there)"]),
    ("from jformer.config import base_config\n\nCONFIG = base_config()\n",
     ["defines no get_config(): add `def get_config():` returning a ConfigDict"]),
    (RAISES_IN_GET_CONFIG, ["get_config() raised KeyError at line 6: 'wmt14'", "fix the config file there"]),
])
def test_bad_config_file(project, capsys, text, fragments):
  config = project / "my_config.py"
  if text is not None:
    config.write_text(text)
  status, err = run_cli(["summary", f"--config={config}"], capsys)
  assert_one_line_error(status, err, f"jformer summary: error: config file '{config}'", *fragments)
  assert list(project.iterdir()) == ([config] if text is not None else [])


def test_a_get_config_that_raises_shows_its_traceback_with_verbose(project, capsys):
  config = project / "my_config.py"
  config.write_text(RAISES_IN_GET_CONFIG)
  with pytest.raises(ValueError, match="get_config\\(\\) raised KeyError at line 6") as error:
    run_cli(["summary", f"--config={config}", "--verbose"], capsys)
  assert isinstance(error.value.__cause__, KeyError)  # the traceback Python prints goes on into the file's line.


def test_usage_errors_exit_2(project, capsys):
  status, err = run_cli(train_argv(project, "--config.train.steps"), capsys)  # No '=value'.
  assert status == 2 and "unrecognised argument '--config.train.steps'" in err and "Traceback" not in err
  status, err = run_cli(["train", f"--config={DEMO}"], capsys)
  assert status == 2 and "the following arguments are required: --workdir" in err
  assert list(project.iterdir()) == []


def write_sweep(path, points):
  path.write_text(f"BASE = {DEMO!r}\n\n\ndef get_sweep():\n  return {points!r}\n")
  return path


@pytest.mark.parametrize("point, fragments", [
    ({"optimizer.warmup_step": 10}, ["point 1 'warmup_step=10'", "did you mean 'optimizer.warmup_steps'?"]),
    ({"train.steps": "many"}, ["point 1 'steps=many'", "'train.steps' is a int; got 'many' (str)"]),
    ({"data.dataset": "wmt99"}, ["point 1 'dataset=wmt99'", "unknown dataset 'wmt99'"]),
])
def test_invalid_sweep_point_launches_nothing(project, capsys, point, fragments):
  sweep_file = write_sweep(project / "typo_sweep.py", [{"model.num_heads": 2}, point])
  root = project / "runs"
  status, err = run_cli(["launch", f"--sweep={sweep_file}", f"--root={root}"], capsys)
  assert_one_line_error(status, err, "launch: error: sweep 'typo_sweep': ", *fragments)
  status, report_err = run_cli(["sweep-report", f"--sweep={sweep_file}", f"--root={root}"], capsys)
  assert_one_line_error(status, report_err, "launch.report: error: sweep 'typo_sweep': ", *fragments)
  assert list(project.iterdir()) == [sweep_file]


def test_sweep_file_that_does_not_parse(project, capsys):
  sweep_file = project / "broken.py"
  sweep_file.write_text("BASE = 'configs/small.py'\n\n\ndef get_sweep(:\n  return []\n")
  for command, prefix in (("launch", "launch: error: "), ("sweep-report", "launch.report: error: ")):
    status, err = run_cli([command, f"--sweep={sweep_file}", f"--root={project / 'runs'}"], capsys)
    assert_one_line_error(status, err, f"{prefix}sweep file '{sweep_file}' does not parse: line 4: ")
  assert list(project.iterdir()) == [sweep_file]


def test_launch_usage_error_exits_2(project, capsys):
  sweep_file = write_sweep(project / "s.py", [{"model.num_heads": 2}])
  status, err = run_cli(["launch", f"--sweep={sweep_file}", "--nodes=2"], capsys)
  assert_one_line_error(status, err, "--nodes apply to --backend=slurm, not --backend=local", expected_status=2)


def run_subprocess(args, cwd):
  env = {**os.environ, "PYTHONPATH": str(cwd)}
  return subprocess.run([sys.executable, "-m", "jformer.main", *args], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=300)


@pytest.mark.integration
def test_process_exit_status_and_stderr(project, repo_root):
  result = run_subprocess(train_argv(project, "--config.train.stpes=5"), repo_root)
  assert result.returncode == 1 and result.stdout == ""
  assert result.stderr == "jformer train: error: unknown config key 'train.stpes'; did you mean 'train.steps'?\n"
  verbose = run_subprocess(train_argv(project, "--config.train.stpes=5", "--verbose"), repo_root)
  assert verbose.returncode == 1 and "Traceback (most recent call last)" in verbose.stderr
  assert "KeyError" in verbose.stderr.splitlines()[-1]
  assert list(project.iterdir()) == []
