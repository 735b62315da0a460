"""Setting config values by dotted key, as a command line types them (`--config.model.num_heads=16`): strings are
converted to the field's type, and an unknown key is refused naming the nearest known one."""

from __future__ import annotations

import ast
import difflib
from typing import Any, Iterator, Mapping

import ml_collections

from jformer.config.schema import groups


def set_value(config: ml_collections.ConfigDict, dotted_key: str, value: Any) -> None:
  """Sets `config.<dotted_key>` to `value` (converted to the field's type); unknown keys raise KeyError. Keys
  inside an option group (`schema.groups()`) are free, nested ones too (`model.layer_kinds.local.attention`):
  what reads the group checks them."""
  *parents, leaf = dotted_key.split(".")
  node = config
  for depth, part in enumerate(parents):
    if part not in node and _inside_group(parents[:depth]):
      with node.unlocked():
        node[part] = ml_collections.ConfigDict()
    if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
      raise KeyError(unknown_key_message(config, ".".join(parents[:depth + 1])))
    node = node[part]
  if leaf not in node:
    if not _inside_group(parents):
      raise KeyError(unknown_key_message(config, dotted_key))
    with node.unlocked():
      node[leaf] = _group_value(value)
    return
  with node.unlocked():
    node[leaf] = _convert(value, node[leaf], dotted_key)


def _inside_group(parts: list[str]) -> bool:
  """Whether the dotted key `parts` is an option group or lies inside one."""
  return any(".".join(parts[:depth]) in groups() for depth in range(1, len(parts) + 1))


def flatten(config: Mapping | ml_collections.ConfigDict, prefix: str = "") -> dict[str, Any]:
  """`{dotted_key: value}` of every leaf (an empty group is a leaf)."""
  flat = {}
  for key, value in config.items():
    if isinstance(value, (Mapping, ml_collections.ConfigDict)) and len(value):
      flat.update(flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def unknown_key_message(config, dotted_key: str) -> str:
  """'unknown config key ...; did you mean ...?' with the nearest known key or group."""
  known = list(flatten(config)) + list(_all_prefixes(config))
  nearest = difflib.get_close_matches(dotted_key, known, n=1, cutoff=0.0)
  hint = f"; did you mean '{nearest[0]}'?" if nearest else ""
  return f"unknown config key '{dotted_key}'{hint}"


def _all_prefixes(config, prefix="") -> Iterator[str]:
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      yield f"{prefix}{key}"
      yield from _all_prefixes(value, f"{prefix}{key}.")


def _group_value(value: Any) -> Any:
  """A value for a key of an option group, whose type only the plug-in knows: a command-line string becomes the
  Python literal it spells (true and false as for bool fields), else stays a string."""
  if not isinstance(value, str):
    return value
  if value.lower() in ("true", "false"):
    return value.lower() == "true"
  return ast.literal_eval(value) if _is_literal(value) else value


def _is_literal(text: str) -> bool:
  try:
    ast.literal_eval(text)
    return True
  except (ValueError, SyntaxError):
    return False


def _convert(value: Any, current: Any, dotted_key: str) -> Any:
  """Converts a command-line string to the type of the current value (bool, int, float, str, tuple...)."""
  if isinstance(current, ml_collections.ConfigDict):
    if isinstance(value, str) and _is_literal(value):
      value = ast.literal_eval(value)
    if not isinstance(value, (Mapping, ml_collections.ConfigDict)):
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
  example = f"give e.g. {dotted_key}={current!r}"
  if isinstance(current, bool) != isinstance(converted, bool) and current is not None:
    raise TypeError(f"config key '{dotted_key}' is a {type(current).__name__}; got {converted!r}: {example}")
  if isinstance(current, float) and isinstance(converted, int):
    converted = float(converted)
  if current is not None and not isinstance(converted, type(current)) and not (
      isinstance(current, (tuple, list)) and isinstance(converted, (tuple, list))):
    raise TypeError(f"config key '{dotted_key}' is a {type(current).__name__}; got {converted!r} "
                    f"({type(converted).__name__}): {example}")
  return converted
