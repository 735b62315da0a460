"""Config loading: overrides with types, unknown keys with the nearest suggestion, invalid combinations."""

import json
import re

import pytest

from jformer import config as config_lib


@pytest.fixture
def demo(repo_root):
  return repo_root / "configs" / "small.py"


def test_overrides_from_command_line_strings_are_typed(demo):
  config = config_lib.load(demo, {"model.num_heads": "8", "model.dropout_rate": "0", "model.share_embeddings":
                                  "false", "model.norm": "pre"})
  assert config.model.num_heads == 8 and isinstance(config.model.num_heads, int)
  assert config.model.dropout_rate == 0.0 and isinstance(config.model.dropout_rate, float)
  assert config.model.share_embeddings is False
  assert config.model.norm == "pre"
  # An option group's keys are the plug-in's: a string becomes the literal it spells, true/false as above.
  mqar = config_lib.load(demo.parent / "mqar.py", {"data.dataset_options.random_non_queries": "false",
                                                   "data.dataset_options.power_a": "0.5"})
  assert mqar.data.dataset_options.random_non_queries is False and mqar.data.dataset_options.power_a == 0.5


def test_unknown_key_names_the_nearest_known_key(demo):
  with pytest.raises(KeyError, match="unknown config key 'model.num_head'; did you mean 'model.num_heads'"):
    config_lib.load(demo, {"model.num_head": 4})
  with pytest.raises(KeyError, match="unknown config key 'modle'; did you mean 'model'"):
    config_lib.load(demo, {"modle.d_model": 4})


def test_wrong_types_are_rejected(demo):
  with pytest.raises(TypeError, match="model.num_heads' is a int"):
    config_lib.load(demo, {"model.num_heads": "many"})
  with pytest.raises(ValueError, match="is a bool"):
    config_lib.load(demo, {"model.share_embeddings": "maybe"})


@pytest.mark.parametrize("overrides, reason", [
    ({"model.num_heads": 3}, "d_model=256 is not divisible by num_heads=3"),
    ({"model.positional": "fourier"}, r"unknown positional encoding 'fourier'; known: \['alibi', "),
    ({"model.positional_options.num_buckets": 64}, r"'sinusoidal' has no option\(s\) \['num_buckets'\]"),
    ({"model.norm": "sandwich"}, "norm='sandwich'"),
    ({"model.remat": "some"}, r"model.remat='some' is not one of 'auto', 'none', 'full'"),
    ({"model.attention": "magic"},
     r"unknown attention variant 'magic'; known: \['additive', 'auto', 'chunked'"),
    ({"model.attention": "xla", "model.attention_dropout_rate": 0.1},
         r"'xla' does not support 'dropout' for model.attention_dropout_rate=0.1"),
    ({"model.attention_options.chunk_size": 64}, r"'auto' has no option\(s\) \['chunk_size'\]"),
    ({"model.architecture": "rnn"},
     r"model.architecture: unknown task 'rnn'; known: \['lm', 'synthetic', 'transformer'\]"),
    ({"model.dtype": "float8"}, "model.dtype='float8'"),
])
def test_invalid_combinations_fail_at_load(demo, overrides, reason):
  with pytest.raises(ValueError, match=reason):
    config_lib.load(demo, overrides)


def test_loaded_config_is_locked_and_flattens(demo):
  config = config_lib.load(demo)
  with pytest.raises(AttributeError):
    config.model.new_field = 1
  flat = config_lib.flatten(config)
  assert flat["model.d_model"] == 256 and "model.attention_options" in flat


def test_config_argument_and_missing_file(tmp_path):
  file = tmp_path / "c.py"
  file.write_text("from jformer.config import base_config\n"
                  "def get_config(size='small'):\n"
                  "  c = base_config()\n"
                  "  c.model.d_model = {'small': 64, 'large': 128}[size]\n"
                  "  return c\n")
  assert config_lib.load(f"{file}:large").model.d_model == 128
  assert config_lib.load(file).model.d_model == 64
  with pytest.raises(FileNotFoundError, match="does not exist"):
    config_lib.load(tmp_path / "nope.py")


@pytest.mark.parametrize("positional, written, options", [
    ("relative", {"relative_num_buckets": 64, "relative_max_distance": 128}, {"num_buckets": 64}),
    ("sinusoidal", {"relative_num_buckets": 64, "relative_max_distance": 256}, {}),
])
def test_runs_written_before_positional_options_still_load(demo, tmp_path, positional, written, options):
  """A run's config.json with model.relative_num_buckets / relative_max_distance (since moved into
  model.positional_options): a 'relative' run keeps the values it changed from the defaults, other runs drop them."""
  config = config_lib.load(demo, {"model.positional": positional})
  resolved = json.loads(config.to_json_best_effort())
  del resolved["model"]["positional_options"]
  resolved["model"].update(written)
  (tmp_path / "config.json").write_text(json.dumps(resolved))
  assert dict(config_lib.load_run(tmp_path).model.positional_options) == options


def test_a_config_file_that_sets_an_unknown_key_fails_at_load(demo, tmp_path):
  typo = tmp_path / "typo.py"
  typo.write_text(demo.read_text().replace("  config.train.steps = 600\n",
                                           "  config.train.steps = 600\n  config.train.stpes = 5\n"))
  with pytest.raises(KeyError, match=re.escape(f"config file '{typo}': unknown config key 'train.stpes'; "
                                              "did you mean 'train.steps'?")):
    config_lib.load(typo)
  # Open groups take new keys (the chosen variant validates them).
  opened = tmp_path / "opened.py"
  opened.write_text(demo.read_text().replace("  config.train.steps = 600\n", "  config.train.steps = 600\n"
                                             "  config.model.attention = 'chunked'\n"
                                             "  config.model.attention_options.query_chunk_size = 16\n"))
  assert config_lib.load(opened).model.attention_options.query_chunk_size == 16
