"""A trained run's identity: the config it wrote (`<workdir>/config.json`), which keys a later command may change,
and the migration of fields written by older versions.

The keys that define a run are the fields declared with `identity=True` (its parameters were made for the model,
its vocabulary for the tokenizer settings, its checkpoints hold a position in the data); every other key (steps,
intervals, optimizer, eval, decode, parallel, logging, dropout, dtype, remat) may change on resume.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import jax
import ml_collections
from etils import epath

from jformer import paths, positional
from jformer.config.overrides import flatten, set_value
from jformer.config.schema import base_config, declared

# Run keys an evaluation of a trained run may change (`jformer evaluate --config.data.max_length=N`): the context
# length it scores; the parameters work at any length their positional tables cover (model.max_length).
EVAL_KEYS = ("data.max_length",)

# The checksum of config.json, written with it (`record_config`) and checked whenever a run's config is read: a
# config.json changed by hand would silently change what translate, evaluate or a resume do.
CONFIG_CHECKSUM = "config_checksum.json"

# Fields of runs written before `model.positional_options` -> the option of the 'relative' encoding they set.
RELATIVE_FIELDS = {"model.relative_num_buckets": "num_buckets", "model.relative_max_distance": "max_distance"}


def is_identity(dotted_key: str) -> bool:
  """Whether `dotted_key` (a field, or a key inside an option group) is part of the run's identity."""
  return any(field.spec.identity and (dotted_key == key or dotted_key.startswith(f"{key}."))
             for key, field in declared())


def changed_keys(old: ml_collections.ConfigDict, new: ml_collections.ConfigDict) -> dict[str, tuple[Any, Any]]:
  """`{dotted_key: (old value, new value)}` of the leaves that differ, compared as written to config.json (JSON)."""
  old, new = (flatten(json.loads(c.to_json_best_effort())) for c in (old, new))
  return {key: (old.get(key), new.get(key)) for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)}


def check_same_run(run: ml_collections.ConfigDict, config: ml_collections.ConfigDict, where: str, fix: str) -> dict:
  """Refuses `config` for the trained `run` if a key that defines the run differs; returns the other differing keys
  (`changed_keys`), which may change.

  Raises:
    ValueError: naming every differing run key with both values, where the run is, and `fix`.
  """
  changed = changed_keys(run, config)
  defining = [key for key in changed if is_identity(key)]
  if defining:
    differ = "; ".join(f"{key}={changed[key][1]!r} (the run has {changed[key][0]!r})" for key in defining)
    raise ValueError(f"{where} was trained with other values of keys that define its parameters, vocabulary or "
                     f"data: {differ}; {fix}")
  return changed


def read_run(workdir: epath.PathLike, *, verify: bool = True) -> ml_collections.ConfigDict:
  """The config a training run wrote to `<workdir>/config.json` (local or gs://...), read over `base_config()` so
  that runs written before a field existed get its default and fields that have moved are read where they are now;
  not validated (what a resume compares against). `verify`: check it against its recorded checksum (a job's
  other processes leave that to process 0, which may be rewriting the file while they read it)."""
  path = epath.Path(workdir) / "config.json"
  if not path.is_file():
    raise FileNotFoundError(f"{path} does not exist: is '{workdir}' the --workdir of a `jformer train` run?")
  record = epath.Path(workdir) / CONFIG_CHECKSUM
  problem = verify and paths.checksum_problem(path, record)
  if problem:
    raise ValueError(f"the run's config {problem}: jformer writes it, so restore it (change settings with "
                     f"--config.KEY=VALUE instead), or delete {os.fspath(record)} to accept the edit")
  try:
    written = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON (line {e.lineno}: {e.msg}); restore it") from None
  return from_values(_moved_fields(flatten(written)))


def write_run(config: ml_collections.ConfigDict, workdir: epath.PathLike) -> None:
  """Writes the resolved `config` to `<workdir>/config.json` (atomically, process 0 only) and records its checksum
  (`record_config`): the run's identity, what `read_run` reads back and every later command checks against.
  `jformer train` writes it with a start's first checkpoint (so a start refused or failed before it saved one
  leaves nothing that refuses the corrected command), `jformer import-hf` with the converted parameters."""
  if jax.process_index() != 0:
    return
  text = json.dumps(json.loads(config.to_json_best_effort()), indent=2, sort_keys=True) + "\n"
  paths.write_atomically(epath.Path(workdir) / "config.json", text)
  record_config(workdir)


def record_config(workdir: epath.PathLike) -> None:
  """Records the checksum of `<workdir>/config.json` (after writing it), which `read_run` checks."""
  paths.record_checksum(epath.Path(workdir) / "config.json", epath.Path(workdir) / CONFIG_CHECKSUM)


def from_values(values: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """`base_config()` with `{dotted_key: value}` set."""
  config = base_config()
  for dotted_key, value in values.items():
    set_value(config, dotted_key, value)
  return config


def _moved_fields(values: dict[str, Any]) -> dict[str, Any]:
  """`values` (dotted keys) with the fields of older runs where they live now: a run with model.positional =
  'relative' keeps its bucket settings as `model.positional_options` (those not at their default, so that the
  model config compares equal on resume); other runs never read them."""
  defaults = positional.get("relative").options
  values = dict(values)
  for key, option in RELATIVE_FIELDS.items():
    value = values.pop(key, defaults[option])
    if values.get("model.positional") == "relative" and value != defaults[option]:
      values[f"model.positional_options.{option}"] = value
  return values
