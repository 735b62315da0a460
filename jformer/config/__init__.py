"""Experiment configs: `configs/*.py` files with `get_config()`, dotted overrides, validation, a run's identity.

    config = load("configs/demo.py", {"train.steps": "100"})   # read, override, import plug-ins, validate, lock
    config = load_run(workdir)                                # the config a trained run wrote, validated
    write_run(config, workdir)                                # a run's config.json and its checksum
    settings = run_settings(config)                           # what training reads: frozen, typed sections

Every field is declared once (`schema`); configs are locked ConfigDicts, an unknown key refused naming the nearest
known one and invalid values or combinations failing here, before anything runs; files compose as plain Python (one
calls `read` on another). Why not `ml_collections.config_flags`: docs/ARCHITECTURE.md (Config).
"""

from __future__ import annotations

import pathlib
from typing import Any, Mapping

import ml_collections
from etils import epath

from jformer.config.files import import_file, import_plugins, read
from jformer.config.identity import (EVAL_KEYS, changed_keys, check_same_run, from_values, is_identity,
                                     read_run, record_config, write_run)
from jformer.config.overrides import flatten, set_value
from jformer.config.schema import SECTIONS, base_config, declared
from jformer.config.settings import RunSettings, run_settings
from jformer.config.validation import THIS_MACHINE, validate
from jformer.decode.search import check_options


def load(path: str | pathlib.Path, overrides: Mapping[str, Any] | None = None, *,
         backend: str | None = THIS_MACHINE) -> ml_collections.ConfigDict:
  """Reads `path` (a file with `get_config()`, may end in `:ARG`), applies dotted `overrides`, imports the plug-ins
  it names, validates (for `backend`, default this machine's: `validate`), returns it locked.

  Override values may be Python values or strings as typed on a command line (`"16"`, `"true"`, `"(1, 2)"`);
  strings are converted to the field's type.
  """
  config = read(path)
  for dotted_key, value in (overrides or {}).items():
    set_value(config, dotted_key, value)
  return checked(config, backend=backend)


def load_run(workdir: epath.PathLike, overrides: Mapping[str, Any] | None = None, *,
             may_change: tuple[str, ...] = (), backend: str | None = THIS_MACHINE) -> ml_collections.ConfigDict:
  """The config a training run wrote to `<workdir>/config.json` (`read_run`), with `overrides` applied, validated
  (for `backend`: `validate`; None for a command that runs no model).

  Overrides of the keys that define the run are refused, naming them (`check_same_run`), except those in
  `may_change` (e.g. `EVAL_KEYS`); so is a decoding option given that the decoding method does not read (e.g.
  `decode.top_k` for beam search: silently ignored, it would hide a mistake).
  """
  run = read_run(workdir)
  overrides = dict(overrides or {})
  config = from_values({**flatten(run), **overrides})
  check_same_run(from_values({**flatten(run), **{k: v for k, v in overrides.items() if k in may_change}}), config,
                 f"the run in {workdir}", "drop those --config overrides")
  config = checked(config, backend=backend)
  check_options(config.decode.method, config.decode, prefix="--config.decode.",
                given=[key.removeprefix("decode.") for key in overrides if key.startswith("decode.")])
  return config


def checked(config: ml_collections.ConfigDict, *, backend: str | None = THIS_MACHINE) -> ml_collections.ConfigDict:
  """`config` with the plug-ins it names imported, validated (for `backend`: `validate`) and locked (what `load`
  returns)."""
  import_plugins(config.imports)
  validate(config, backend)
  config.lock()
  return config


__all__ = ["EVAL_KEYS", "SECTIONS", "THIS_MACHINE", "RunSettings", "base_config", "changed_keys", "check_same_run",
           "checked", "declared", "flatten", "from_values", "import_file", "import_plugins", "is_identity", "load",
           "load_run", "read", "read_run", "record_config", "run_settings", "set_value", "validate", "write_run"]
