"""Experiment configs: `configs/*.py` files with `get_config()`, dotted overrides, validation.

`load(path, overrides)` is the one way configs are read (the CLI, tests and config files that build on
other config files all use it). Configs are locked ConfigDicts: an unknown key is an error that names the
nearest known key, and invalid combinations fail here, before anything runs.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import pathlib
from typing import Any, Mapping

import ml_collections

# Groups whose keys are not fixed in advance (the chosen variant validates them).
OPEN_GROUPS = ("model.attention_options",)


def base_config() -> ml_collections.ConfigDict:
  """Every field an experiment can set, with its default; config files start from this."""
  config = ml_collections.ConfigDict()

  config.model = model = ml_collections.ConfigDict()
  model.architecture = "transformer"  # 'transformer' (encoder-decoder) or 'lm' (decoder-only).
  model.vocab_size = 32000  # Shared source/target vocabulary size (SentencePiece).
  model.d_model = 512  # Width of embeddings and residual stream (paper: d_model).
  model.num_heads = 8  # Attention heads (paper: h); d_k = d_v = d_model / num_heads.
  model.d_ff = 2048  # Inner width of the feed-forward sublayer (paper: d_ff).
  model.num_encoder_layers = 6  # Encoder layers (paper: N).
  model.num_decoder_layers = 6  # Decoder layers (paper: N).
  model.dropout_rate = 0.1  # Dropout on sublayer outputs and embedding sums (paper: P_drop).
  model.attention_dropout_rate = 0.0  # Dropout on attention weights (not in the paper).
  model.attention = "dot_product"  # Attention variant, a name from `jformer attention list`.
  model.attention_options = ml_collections.ConfigDict()  # Keyword options of that variant.
  model.positional = "sinusoidal"  # 'sinusoidal' (paper), 'learned', 'rotary' or 'none'.
  model.max_length = 512  # Longest sequence the position table covers.
  model.norm = "post"  # 'post': LayerNorm(x + Sublayer(x)) as the paper; 'pre': x + Sublayer(LayerNorm(x)).
  model.activation = "relu"  # Feed-forward nonlinearity: 'relu' (paper) or 'gelu'.
  model.share_embeddings = True  # One embedding matrix for source and target tokens (paper Sec. 3.4).
  model.tie_output_embedding = True  # Pre-softmax projection = target embedding transposed (paper Sec. 3.4).
  model.dtype = "float32"  # Compute dtype: 'float32' or 'bfloat16' (parameters stay float32).
  return config


def load(path: str | pathlib.Path, overrides: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
  """Reads `path` (a file with `get_config()`), applies dotted `overrides`, validates, returns it locked.

  `path` may end in `:ARG`, passed as `get_config(ARG)`. Override values may be Python values or strings
  as typed on a command line (`"16"`, `"true"`, `"(1, 2)"`); strings are converted to the field's type.
  """
  config = _read(path)
  for dotted_key, value in (overrides or {}).items():
    set_value(config, dotted_key, value)
  validate(config)
  config.lock()
  return config


def set_value(config: ml_collections.ConfigDict, dotted_key: str, value: Any) -> None:
  """Sets `config.<dotted_key>` to `value` (converted to the field's type); unknown keys raise KeyError."""
  *parents, leaf = dotted_key.split(".")
  node = config
  for depth, part in enumerate(parents):
    if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
      raise KeyError(_unknown_key_message(config, ".".join(parents[:depth + 1])))
    node = node[part]
  if leaf not in node:
    if ".".join(parents) not in OPEN_GROUPS:
      raise KeyError(_unknown_key_message(config, dotted_key))
    with node.unlocked():
      node[leaf] = ast.literal_eval(value) if isinstance(value, str) and _is_literal(value) else value
    return
  with node.unlocked():
    node[leaf] = _convert(value, node[leaf], dotted_key)


def validate(config: ml_collections.ConfigDict) -> None:
  """Fails with the reason on combinations that cannot run (d_model % heads, unknown variants, ...)."""
  from jformer import models  # Validation of the model section lives with the model.

  models.build(config)


def flatten(config: ml_collections.ConfigDict, prefix: str = "") -> dict[str, Any]:
  """`{dotted_key: value}` of every leaf."""
  flat = {}
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict) and len(value):
      flat.update(flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def _read(path) -> ml_collections.ConfigDict:
  path_str, _, arg = str(path).partition(":")
  file = pathlib.Path(path_str)
  if not file.is_file():
    raise FileNotFoundError(f"config file '{file}' does not exist (pass e.g. --config=configs/demo.py)")
  spec = importlib.util.spec_from_file_location(f"jformer_config_{file.stem}", file)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise AttributeError(f"config file '{file}' defines no get_config()")
  config = module.get_config(arg) if arg else module.get_config()
  if not isinstance(config, ml_collections.ConfigDict):
    raise TypeError(f"get_config() of '{file}' returned {type(config).__name__}, not a ConfigDict")
  return config


def _unknown_key_message(config, dotted_key: str) -> str:
  known = list(flatten(config)) + list(_all_prefixes(config))
  nearest = difflib.get_close_matches(dotted_key, known, n=1, cutoff=0.0)
  hint = f"; did you mean '{nearest[0]}'?" if nearest else ""
  return f"unknown config key '{dotted_key}'{hint}"


def _all_prefixes(config, prefix=""):
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      yield f"{prefix}{key}"
      yield from _all_prefixes(value, f"{prefix}{key}.")


def _is_literal(text: str) -> bool:
  try:
    ast.literal_eval(text)
    return True
  except (ValueError, SyntaxError):
    return False


def _convert(value: Any, current: Any, dotted_key: str) -> Any:
  """Converts a command-line string to the type of the current value (bool, int, float, str, tuple...)."""
  if isinstance(current, ml_collections.ConfigDict):
    if isinstance(value, str):
      value = ast.literal_eval(value)
    if not isinstance(value, Mapping):
      raise TypeError(f"config key '{dotted_key}' is a group; give a dict, e.g. \"{{'chunk_size': 128}}\"")
    return ml_collections.ConfigDict(dict(value))
  if not isinstance(value, str) or isinstance(current, str):
    converted = value
  elif isinstance(current, bool):
    lowered = value.lower()
    if lowered not in ("true", "false", "1", "0"):
      raise ValueError(f"config key '{dotted_key}' is a bool; got '{value}' (use true or false)")
    converted = lowered in ("true", "1")
  else:
    converted = ast.literal_eval(value) if _is_literal(value) else value
  if isinstance(current, bool) != isinstance(converted, bool) and current is not None:
    raise TypeError(f"config key '{dotted_key}' is a {type(current).__name__}; got {converted!r}")
  if isinstance(current, float) and isinstance(converted, int):
    converted = float(converted)
  if current is not None and not isinstance(converted, type(current)) and not (
      isinstance(current, (tuple, list)) and isinstance(converted, (tuple, list))):
    raise TypeError(f"config key '{dotted_key}' is a {type(current).__name__}; got {converted!r} "
                    f"({type(converted).__name__})")
  return converted
