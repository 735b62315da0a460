"""Plug-ins from the researcher's own files (`config.imports`): a variant with a learned parameter, defined in
tests/plugins/ outside the package, passes the whole variant matrix and trains from the command line."""

import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

import test_attention_variants as matrix
from conftest import REPO, tiny_overrides
from jformer import attention, checkpoint
from jformer import config as config_lib

PLUGIN = REPO / "tests" / "plugins" / "learned_temperature.py"
NAME = "learned_temperature"


@pytest.fixture
def plugin_registry(monkeypatch, scratch_registries):
  """The registries with the plug-in loaded, dropped after the test (other tests see the built-ins)."""
  monkeypatch.setattr(config_lib, "_IMPORTED_PLUGINS", {})
  config_lib.import_plugins(str(PLUGIN))


def test_plugin_variant_passes_the_whole_matrix(plugin_registry):
  variant = attention.get(NAME)
  assert set(variant.params) == {"log_scale"} and variant.supports == set(attention.FEATURES) - {"dropout"}
  for setting, case in sorted(matrix.SETTINGS.items()):
    assert case.needs <= variant.supports, setting
    matrix.test_variant_matches_reference(NAME, setting)
  matrix.test_decode_steps_match_full_forward(NAME)
  matrix.test_undeclared_features_are_refused(NAME)


def test_plugin_is_imported_once_and_bad_imports_are_clear(plugin_registry):
  config_lib.import_plugins(f"{PLUGIN}, {PLUGIN}")  # already imported: not registered twice
  with pytest.raises(FileNotFoundError, match="plugin file '.*nowhere.py' does not exist"):
    config_lib.import_plugins("nowhere.py")
  with pytest.raises(ModuleNotFoundError, match="config.imports: no module 'no_such_package.variants'"):
    config_lib.import_plugins("no_such_package.variants")


def test_plugin_variant_trains_from_the_command_line(tiny_corpus, tmp_path):
  """`jformer train --config.imports=FILE --config.model.attention=NAME` in a fresh process: two steps, and the
  learned parameter moved from its initial value in every attention of the model."""
  workdir = tmp_path / "run"
  overrides = tiny_overrides(tiny_corpus, **{"imports": str(PLUGIN), "model.attention": NAME, "train.steps": 2,
                                             "train.eval_every": 2, "train.checkpoint_every": 2,
                                             "train.bleu_examples": 4})
  command = [sys.executable, "-m", "jformer.main", "train", "--config=configs/demo.py", f"--workdir={workdir}",
             *(f"--config.{key}={value}" for key, value in overrides.items())]
  done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  assert config_lib.load_run(workdir).imports == str(PLUGIN)  # so translate/resume import it too
  with checkpoint.Checkpointer(str(workdir / "checkpoints"), read_only=True) as ckpt:
    assert ckpt.latest_step() == 2
    params = ckpt.restore_params()
  scales = [leaf for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
            if NAME in jax.tree_util.keystr(path) and "log_scale" in jax.tree_util.keystr(path)]
  assert len(scales) == 3  # encoder self, decoder self, cross attention (one layer each)
  assert all(np.abs(np.asarray(s)).max() > 0 for s in scales)
