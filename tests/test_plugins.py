"""Plug-ins from the researcher's own files (`config.imports`): a variant with a learned parameter, defined in
tests/plugins/ outside the package (loaded by the `plugin_registry` fixture of conftest.py), passes the variant matrix
(all of it in the slow run) and trains from the command line."""

import subprocess
import sys

import jax
import numpy as np
import pytest

import helpers as matrix
from helpers import PLUGIN, REPO, tiny_overrides
from helpers import PLUGIN_NAME as NAME
from jformer import attention, checkpoint
from jformer import config as config_lib


# What the plug-in declares (checked below): written before "softcap" and "window" existed, it keeps working.
LATER = {"softcap", "window"}
SUPPORTS = set(attention.FEATURES) - {"dropout"} - LATER


def test_plugin_variant_declares_its_parameter_and_every_feature_but_dropout_and_later_ones(plugin_registry):
  variant = attention.get(NAME)
  assert set(variant.params) == {"log_scale"} and variant.supports == SUPPORTS
  # The whole matrix applies but the soft-cap and window settings (a call asking for them is refused: test below).
  assert all(case.needs <= variant.supports for case in matrix.SETTINGS.values() if not case.needs & LATER)


@pytest.mark.parametrize("setting", [
    pytest.param(setting, marks=() if setting == "packed_decoder_multi_query" else pytest.mark.slow)
    for setting in sorted(matrix.SETTINGS)])
def test_plugin_variant_passes_the_matrix(plugin_registry, setting):
  """The whole matrix in the slow run; by default the setting that asks for most features at once (the plug-in's
  own math is not jformer's: what is checked by default is that a plug-in's variant runs through the checks)."""
  matrix.check_variant_matches_reference(NAME, setting)


def test_plugin_variant_decodes_and_refuses_what_it_does_not_declare(plugin_registry):
  matrix.check_decode_steps_match_full_forward(NAME)
  matrix.check_undeclared_features_are_refused(NAME)


def test_plugin_is_imported_once_and_bad_imports_are_clear(plugin_registry):
  config_lib.import_plugins(f"{PLUGIN}, {PLUGIN}")  # already imported: not registered twice
  with pytest.raises(FileNotFoundError, match="plugin file '.*nowhere.py' does not exist"):
    config_lib.import_plugins("nowhere.py")
  with pytest.raises(ValueError, match="config.imports: no module 'no_such_package.variants'"):
    config_lib.import_plugins("no_such_package.variants")


@pytest.mark.integration
def test_plugin_variant_trains_from_the_command_line(tiny_corpus, tmp_path):
  """`jformer train --config.imports=FILE --config.model.attention=NAME` in a fresh process: two steps, and the
  learned parameter moved from its initial value in every attention of the model."""
  workdir = tmp_path / "run"
  overrides = tiny_overrides(tiny_corpus, **{"imports": str(PLUGIN), "model.attention": NAME, "train.steps": 2,
                                             "train.eval_every": 2, "train.checkpoint_every": 2,
                                             "train.bleu_examples": 4})
  command = [sys.executable, "-m", "jformer.main", "train", "--config=configs/small.py", f"--workdir={workdir}",
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


PLUGIN_OF_EACH_KIND = '''
"""A researcher's positional encoding, dataset and task, registered from a file outside the package."""
import jax.numpy as jnp

from jformer import data, tasks
from jformer.models import LanguageModel
from jformer.positional import register
from jformer.registry import Param, constant
from jformer.tasks.language_model import LanguageModelTask


@register("learned_offset", acts="embedding", params={"offset": Param(("d_model",), constant(0.5))})
def learned_offset(positions, *, dims, params):
  """A learned vector added at every position (a toy: no position information)."""
  return jnp.broadcast_to(params["offset"], positions.shape + (dims["d_model"],))


@data.register_dataset("my_corpus")
def my_corpus(name, split, **kwargs):
  return data.load_split("parallel_text", split, **kwargs)


@tasks.register("lm_without_baseline", model=LanguageModel, pairs=False)
class LanguageModelWithoutBaseline(LanguageModelTask):
  """A language model whose final results leave out the xz baseline (a toy: what a run reports is the task's)."""

  def xz_baseline(self):
    return float("nan")
'''


def test_positional_encodings_datasets_and_tasks_load_from_the_same_imports(tmp_path, scratch_registries):
  from jformer import data, models, tasks

  plugin = tmp_path / "my_plugins.py"
  plugin.write_text(PLUGIN_OF_EACH_KIND)
  with pytest.raises(ValueError, match="unknown positional encoding 'learned_offset'"):
    config_lib.load(REPO / "configs" / "small.py", {"model.positional": "learned_offset"})
  with pytest.raises(ValueError, match="unknown task 'lm_without_baseline'"):
    config_lib.load(REPO / "configs" / "small.py", {"model.architecture": "lm_without_baseline"})
  config = config_lib.load(REPO / "configs" / "small.py", {"imports": str(plugin), "model.positional": "learned_offset",
                                                           "data.dataset": "my_corpus", "model.vocab_size": 50,
                                                           "model.d_model": 32, "model.d_ff": 64})
  params = tasks.build_model(config).init(jax.random.PRNGKey(0), jax.numpy.ones((1, 4), int), jax.numpy.ones((1, 3), int))
  assert params["params"]["encoder"]["positions"]["offset"].value.shape == (32,)
  assert data.get_dataset("my_corpus") is not None
  # The task: its model is built for its name, and its declaration is read by validation (rows of single sequences
  # take no token budget).
  task_config = {"imports": str(plugin), "model.architecture": "lm_without_baseline"}
  assert isinstance(tasks.build_model(config_lib.load(REPO / "configs" / "small.py", task_config)),
                    models.LanguageModel)
  with pytest.raises(ValueError, match="data.batch_tokens=512 is for translation pairs; "
                                       "model.architecture='lm_without_baseline' rows are always full"):
    config_lib.load(REPO / "configs" / "small.py", {**task_config, "data.batch_tokens": 512, "data.packing": False})
  assert tasks.get("lm_without_baseline").task.__name__ == "LanguageModelWithoutBaseline"
