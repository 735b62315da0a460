"""Plug-ins (`--config.imports`) that fail: one line naming where, exit status 1, nothing written.

A plug-in file or module that raises while it is imported names the file and the line; a plug-in registering a
name already taken (an attention variant, a positional encoding) names both registrations, file and line, and says
to rename one. Through `jformer train` in this process (`helpers.run_cli`), once as a real process.
"""

import importlib
import os
import re
import subprocess
import sys

import pytest
from helpers import REPO, SMALL, assert_one_line_error, run_cli

from jformer import attention
from jformer import config as config_lib

# Line 6 uses a name that was never defined.
RAISES_IN_ITS_OWN_CODE = '''"""A plug-in with a typo in its own code."""
import jax.numpy as jnp

from jformer.attention import register

SCALE = jnp.sqrt(2.0) * undefined_scale
'''

# Line 6 registers a feature no variant can declare: jformer's registry raises, called from that line.
RAISES_IN_ITS_REGISTRATION = '''"""A plug-in declaring a feature that does not exist."""
from jformer.attention import register
from jformer.attention.registry import softmax_weights


@register("flashy", supports={"causal", "flash"}, weights=softmax_weights)
def flashy(query, key, value, **masking):
  """Never registered."""
  raise NotImplementedError
'''

# Registers attention variant NAME at line 6 (a softmax variant: its own call never runs here).
VARIANT = '''"""A researcher's attention variant."""
from jformer.attention import register
from jformer.attention.registry import softmax_weights


@register("{name}", supports={{"causal"}}, weights=softmax_weights)
def variant(query, key, value, **masking):
  """Registered, never called."""
  raise NotImplementedError
'''

# Registers positional encoding NAME at line 5.
POSITIONAL = '''"""A researcher's positional encoding."""
from jformer.positional import register


@register("{name}", acts="none")
def encoding():
  """Registered, never called."""
'''


def train(tmp_path, capsys, imports):
  """`jformer train` of configs/small.py importing `imports`: (exit status, stderr)."""
  return run_cli(["train", f"--config={SMALL}", f"--workdir={tmp_path / 'run'}", f"--config.imports={imports}"],
                 capsys)


@pytest.mark.parametrize("text, error", [
    (RAISES_IN_ITS_OWN_CODE, "NameError at line 6: name 'undefined_scale' is not defined"),
    (RAISES_IN_ITS_REGISTRATION, "ValueError at line 6: unknown features ['flash'] for 'flashy'"),
])
def test_a_plugin_file_that_raises_at_import_is_one_line_naming_the_file_and_line(tmp_path, capsys,
                                                                                  scratch_registries, text, error):
  plugin = tmp_path / "my_variants.py"
  plugin.write_text(text)
  status, err = train(tmp_path, capsys, plugin)
  assert_one_line_error(status, err, f"jformer train: error: plugin file '{plugin}' raised {error}")
  assert sorted(tmp_path.iterdir()) == [plugin]  # no workdir.


def test_a_plugin_module_that_raises_at_import_is_one_line_naming_its_file_and_line(tmp_path, capsys, monkeypatch,
                                                                                    scratch_registries):
  """The same by module name (a plug-in on the Python path), and a module it imports that is not installed is named
  as that, not as the plug-in missing."""
  (tmp_path / "typo_variants.py").write_text(RAISES_IN_ITS_OWN_CODE)
  (tmp_path / "needs_a_package.py").write_text('"""Imports what is not installed."""\n\nimport no_such_dependency\n')
  monkeypatch.syspath_prepend(str(tmp_path))
  status, err = train(tmp_path, capsys, "typo_variants")
  assert_one_line_error(status, err, f"jformer train: error: config.imports: module 'typo_variants' (file "
                                     f"'{tmp_path / 'typo_variants.py'}') raised NameError at line 6: name "
                                     "'undefined_scale' is not defined")
  status, err = train(tmp_path, capsys, "needs_a_package")
  assert_one_line_error(status, err, f"jformer train: error: config.imports: module 'needs_a_package' (file "
                                     f"'{tmp_path / 'needs_a_package.py'}') raised ModuleNotFoundError at line 3: No "
                                     "module named 'no_such_dependency'")
  assert not (tmp_path / "run").exists()


def registrations(message: str) -> list[tuple[str, int]]:
  """The (file, line) pairs of 'registered twice: at FILE:LINE and at FILE:LINE;' in `message`."""
  found = re.search(r"is registered twice: at (\S+):(\d+) and at (\S+):(\d+); ", message)
  assert found, message
  return [(found[1], int(found[2])), (found[3], int(found[4]))]


def registered_at(file: str, line: int) -> str:
  """The text of `line` of `file` (absolute, or relative to the working directory: the project root in tests)."""
  return (REPO / file).read_text().splitlines()[line - 1]


@pytest.mark.parametrize("kind, text, name, built_in", [
    ("attention variant", VARIANT, "dot_product", "jformer/attention/dot_product.py"),
    ("positional encoding", POSITIONAL, "sinusoidal", "jformer/positional/sinusoidal.py"),
])
def test_a_plugin_taking_a_built_in_name_names_both_registrations_and_the_fix(tmp_path, capsys, scratch_registries,
                                                                             kind, text, name, built_in):
  plugin = tmp_path / "mine.py"
  plugin.write_text(text.format(name=name))
  status, err = train(tmp_path, capsys, plugin)
  line = 6 if kind == "attention variant" else 5
  assert_one_line_error(status, err, f"jformer train: error: plugin file '{plugin}' raised ValueError at line {line}: "
                                     f"{kind} '{name}' is registered twice: at ", f" and at {plugin}:{line}; rename "
                                     "one of them")
  (first_file, first_line), second = registrations(err)
  assert (REPO / first_file).resolve() == REPO / built_in and second == (str(plugin), line)
  assert f'register("{name}"' in registered_at(first_file, first_line)  # the line that registers the built-in.
  assert not (tmp_path / "run").exists()


def test_two_plugins_registering_one_name_name_both_files_and_the_fix(tmp_path, capsys, scratch_registries):
  first, second = tmp_path / "ours.py", tmp_path / "theirs.py"
  for plugin in (first, second):
    plugin.write_text(VARIANT.format(name="my_attention"))
  status, err = train(tmp_path, capsys, f"{first},{second}")
  assert_one_line_error(status, err, f"jformer train: error: plugin file '{second}' raised ValueError at line 6: "
                                     f"attention variant 'my_attention' is registered twice: at {first}:6 and at "
                                     f"{second}:6; rename one of them, or import the file once")


# Line 17 registers two different functions under one name.
ONE_LINE_TWO_FUNCTIONS = VARIANT.format(name="one_name") + '''

def other(query, key, value, **masking):
  """Another function."""
  raise NotImplementedError


for fn in (variant, other): register("twice", supports={"causal"}, weights=softmax_weights)(fn)
'''


def test_a_plugin_imported_by_a_script_then_by_its_runs_config_is_one_registration(tmp_path, monkeypatch,
                                                                                  scratch_registries):
  """A script that imports its plug-in (`import mine`), then loads a run whose config.imports names mine.py: the
  file runs twice, its line registering the same function again, which is the same registration (the name then
  resolves to the newer object, as after a reload). Different registrations of one name stay refused: two files
  (the test above), or one line registering two functions."""
  plugin = tmp_path / "mine.py"
  plugin.write_text(VARIANT.format(name="mine_attention"))
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.chdir(tmp_path)
  try:
    importlib.import_module("mine")
    first = attention.get("mine_attention")
    config_lib.import_plugins("mine.py")
    assert attention.get("mine_attention") is not first and attention.REGISTRY.origin("mine_attention") == "mine.py:6"
  finally:
    sys.modules.pop("mine", None)
  looped = tmp_path / "looped.py"
  looped.write_text(ONE_LINE_TWO_FUNCTIONS)
  with pytest.raises(ValueError, match=r"attention variant 'twice' is registered twice: at looped.py:17 and at "
                                       r"looped.py:17; rename one of them"):
    config_lib.import_plugins(str(looped))


@pytest.mark.integration
def test_the_process_prints_one_line_and_exits_1(tmp_path):
  plugin = tmp_path / "my_variants.py"
  plugin.write_text(RAISES_IN_ITS_OWN_CODE)
  result = subprocess.run([sys.executable, "-m", "jformer.main", "train", f"--config={SMALL}",
                           f"--workdir={tmp_path / 'run'}", f"--config.imports={plugin}"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300)
  assert result.returncode == 1 and result.stdout == ""
  assert result.stderr == (f"jformer train: error: plugin file '{plugin}' raised NameError at line 6: name "
                           "'undefined_scale' is not defined\n")
  assert not (tmp_path / "run").exists()
