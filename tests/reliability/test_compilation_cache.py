"""The persistent compilation cache across installs, processes and concurrent runs: nothing on stderr
(`jformer.runtime.configure_compilation_cache` says why it always runs with a size limit and `filelock`)."""

import os
import subprocess
import sys

import pytest
from helpers import REPO, SMALL, run_command, tiny_overrides

from jformer import runtime

# Run as `python -c`: the rest of the command line as `jformer`'s, in a process where `filelock` cannot be
# imported (an install that lacks it).
WITHOUT_FILELOCK = """
import runpy, sys
sys.modules["filelock"] = None  # import filelock -> ImportError
sys.argv[0] = "jformer"
runpy.run_module("jformer.main", run_name="__main__")
"""

# What JAX writes without a size limit (an install without `filelock`, earlier jformer, another JAX program on the
# folder): entries without their `-atime` file.
UNLIMITED_WRITER = """
import sys
sys.modules["filelock"] = None
import jax, jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
for n in (8, 16):
  jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((n, n))).block_until_ready()
"""


def entries(folder):
  """{key: whether it has its -atime file} of the cache's entries."""
  names = {p.name for p in folder.iterdir()}
  return {n.removesuffix("-cache"): n.replace("-cache", "-atime") in names for n in names if n.endswith("-cache")}


def train_args(corpus, workdir, **extra):
  return ["train", f"--config={SMALL}", f"--workdir={workdir}",
          *(f"--config.{k}={v}" for k, v in tiny_overrides(corpus, **{"train.steps": 2, **extra}).items())]


@pytest.mark.integration
def test_without_filelock_the_cache_turns_itself_off_in_one_line(tmp_path):
  folder = tmp_path / "xla"
  result = subprocess.run([sys.executable, "-c", WITHOUT_FILELOCK, "list", "task"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=_env(folder))
  assert result.returncode == 0 and "transformer" in result.stdout
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "persistent compilation cache off: it needs the `filelock` package" in lines[0], lines
  assert not folder.exists()


@pytest.mark.slow  # five tiny training runs, two at once: ~3 minutes on 2 busy cores.
def test_one_cache_folder_across_installs_and_processes_one_after_the_other_and_at_once(tiny_corpus, tmp_path):
  folder = tmp_path / "xla"
  env = _env(folder)
  subprocess.run([sys.executable, "-c", UNLIMITED_WRITER, str(folder)], check=True, timeout=120, env=env)
  old = entries(folder)
  assert old and not any(old.values())  # written without -atime files.

  first = run_command(train_args(tiny_corpus, tmp_path / "a"), env=env)
  assert (first.returncode, first.stderr) == (0, "")
  after = entries(folder)
  assert set(old) < set(after) and all(after.values())  # the old entries got their -atime, the new ones too.

  second = run_command(train_args(tiny_corpus, tmp_path / "b"), env=env)  # the same programs: read back.
  assert (second.returncode, second.stderr) == (0, "")
  assert entries(folder) == after

  # Two runs at once compiling the same new programs (another model): both write and read the same entries.
  args = [train_args(tiny_corpus, tmp_path / f"c{i}", **{"model.num_heads": 4}) for i in range(2)]
  together = [subprocess.Popen([sys.executable, "-m", "jformer.main", *a], cwd=REPO, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for a in args]
  outputs = [p.communicate(timeout=600) for p in together]
  assert [(p.returncode, err) for p, (_, err) in zip(together, outputs)] == [(0, ""), (0, "")]
  final = entries(folder)
  assert set(after) < set(final) and all(final.values())


def _env(folder):
  return {**os.environ, runtime.CACHE_ENV: str(folder)}
