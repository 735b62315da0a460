"""Config files (`configs/*.py` with `get_config()`) and the plug-ins a config imports (`config.imports`)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import pathlib
import sys
import traceback
from typing import Any

import ml_collections

from jformer import registry
from jformer.config.identity import from_values
from jformer.config.overrides import flatten, unknown_key_message
from jformer.config.schema import base_config, groups

# Imported plug-ins: key (resolved path or module name) -> (module, the (kind, name) entries its import registered).
_IMPORTED_PLUGINS: dict[str, tuple[Any, set[tuple[str, str]]]] = {}


def read(path: str | pathlib.Path) -> ml_collections.ConfigDict:
  """The config a file's `get_config()` returns, keys checked, not yet validated: what a config file that builds on
  another reads (`config = jformer.config.read(HERE / "small.py")`, then sets what differs).

  `path` may end in `:ARG`, passed as `get_config(ARG)`. A run's `config.json` is a config file too (e.g. an imported
  model's, to train a converted copy of it in another workdir).
  """
  path_str, _, arg = str(path).partition(":")
  file = pathlib.Path(path_str)
  if file.suffix == ".json" and file.is_file():
    config = from_values(flatten(json.loads(file.read_text())))
    _check_known_keys(config, file)
    return config
  module = import_file(file, "config", "--config=configs/demo.py")
  if not hasattr(module, "get_config"):
    raise ValueError(f"config file '{file}' defines no get_config(): add `def get_config():` returning a ConfigDict "
                     "(see configs/demo.py)")
  try:
    config = module.get_config(arg) if arg else module.get_config()
  except Exception as e:  # whatever the file's own code raises: one line that says where (--verbose: the traceback).
    raise ValueError(f"config file '{file}': get_config() raised {type(e).__name__} at {_where(e, file)}: {e}; fix "
                     "the config file there") from e
  if not isinstance(config, ml_collections.ConfigDict):
    raise TypeError(f"get_config() of '{file}' returned {type(config).__name__}, not a ConfigDict")
  _check_known_keys(config, file)
  return config


def import_plugins(imports: str) -> list:
  """Imports the plug-ins `config.imports` names (comma-separated files or module names) so that their `@register`
  lines run before the model, the data or a sweep point is built; each once per process while what it registered
  stands (a `Registry.temporary()` block that dropped its entries gets them registered again).

  Every entry point reads configs through `load`/`load_run`, so every process (hosts of a pod, sweep points,
  `translate` on the run later) imports them. A file path is resolved from the working directory.
  """
  modules = []
  for name in filter(None, (part.strip() for part in imports.split(","))):
    is_file = name.endswith(".py") or "/" in name
    key = str(pathlib.Path(name).resolve()) if is_file else name
    if key not in _IMPORTED_PLUGINS or not _still_registered(_IMPORTED_PLUGINS[key][1]):
      before = _registered()
      module = (import_file(key, "plugin", "--config.imports=path/to/my_variants.py") if is_file
                else _import_module(name, reload=key in _IMPORTED_PLUGINS))
      _IMPORTED_PLUGINS[key] = module, _registered() - before
    modules.append(_IMPORTED_PLUGINS[key][0])
  return modules


def _registered() -> set[tuple[str, str]]:
  return {(kind, name) for kind, entries in registry.kinds().items() for name in entries.available()}


def _still_registered(entries: set[tuple[str, str]]) -> bool:
  kinds = registry.kinds()
  return all(name in kinds[kind] for kind, name in entries)


def _import_module(name: str, *, reload: bool):
  """Imports plug-in module `name`; one line when it is not there, or naming its file and line when running it
  raises (a module it imports that is missing included)."""
  try:
    return importlib.reload(sys.modules[name]) if reload and name in sys.modules else importlib.import_module(name)
  except ModuleNotFoundError as e:
    if e.name is None or name == e.name or name.startswith(f"{e.name}."):  # `name` itself (or its package) is absent.
      raise ValueError(f"config.imports: no module '{name}' ({e}); give a module on the Python path or a file path "
                       "ending in .py") from None
    error = e
  except Exception as e:  # whatever the module raises while it runs.
    error = e
  try:
    spec = importlib.util.find_spec(name)
  except Exception:  # its package raised while it ran: the package's error is the one to show.
    spec = None
  file = spec.origin if spec is not None and spec.origin else name
  raise ValueError(f"config.imports: module '{name}' (file '{file}') raised {type(error).__name__} at "
                   f"{_where(error, file)}: {error}") from error


def import_file(file: str | pathlib.Path, kind: str, example: str):
  """Imports a Python file by path (config and plug-in files are not modules of a package); an error while doing
  so is one line naming the file and the line it happened at."""
  file = pathlib.Path(file)
  if not file.is_file():
    raise FileNotFoundError(f"{kind} file '{file}' does not exist (pass e.g. {example})")
  spec = importlib.util.spec_from_file_location(f"jformer_{kind}_{file.stem}", file)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:
    raise ValueError(f"{kind} file '{file}' does not parse: line {e.lineno}: {e.msg} (fix the Python syntax there)"
                     ) from e
  except Exception as e:  # whatever the file raises while it runs: one line that says where.
    raise ValueError(f"{kind} file '{file}' raised {type(e).__name__} at {_where(e, file)}: {e}") from e
  return module


def _where(error: BaseException, file: str | pathlib.Path) -> str:
  """'line N': the innermost line of `file` in `error`'s traceback (where the file's own code, or the jformer
  call it made, failed); 'while importing it' when the file is not in it."""
  names = {str(file), str(pathlib.Path(file).resolve())}
  frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename in names]
  return f"line {frames[-1].lineno}" if frames else "while importing it"


def _check_known_keys(config: ml_collections.ConfigDict, file: pathlib.Path) -> None:
  """Refuses a key that config `file` added and `base_config()` lacks (a typo such as `config.train.stpes = 5`);
  keys inside option groups are free. Checked after `get_config()`, so keys added under `config.unlocked()` are
  caught too."""
  base = base_config()
  known = set(flatten(base))
  free = tuple(f"{group}." for group in groups())
  for dotted_key in flatten(config):
    if dotted_key not in known and not dotted_key.startswith(free):
      raise KeyError(f"config file '{file}': {unknown_key_message(base, dotted_key)}")
