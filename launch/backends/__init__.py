"""Where a sweep's points run: `local` (subprocesses here), `slurm` (one sbatch job array), `tpu_vm` (gcloud)."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
from typing import Any, Mapping, TypeVar

from launch.sweep import SweepError

SettingsT = TypeVar("SettingsT")


class BackendError(ValueError):
  """The backend cannot run from here (its command-line tool is missing): one line, exit status 1, as for other
  input that is wrong (docs/reliability.md)."""


def require_tool(tool: str, fix: str) -> None:
  """Raises BackendError naming `tool` and `fix` unless `tool` is on PATH."""
  if shutil.which(tool) is None:
    raise BackendError(f"`{tool}` is not on PATH: {fix}")


def merge_settings(cls: type[SettingsT], sweep_name: str, section: str, from_file: Mapping[str, Any],
                   flags: Mapping[str, Any]) -> SettingsT:
  """`cls(**from_file)` with the flags that were given (not None) on top; unknown keys name the fix."""
  known = [field.name for field in dataclasses.fields(cls)]
  unknown = sorted(set(from_file) - set(known))
  if unknown:
    raise SweepError(f"sweep '{sweep_name}': unknown {section} setting(s) {unknown}; known: {', '.join(known)}")
  return cls(**{**from_file, **{key: value for key, value in flags.items() if value is not None}})


def shell_word(word: str) -> str:
  """`word` quoted for a shell; `--flag=value` keeps the flag outside the quotes for readability."""
  flag, sep, value = word.partition("=")
  quoted = shlex.quote(word)
  return f"{flag}={shlex.quote(value)}" if sep and flag.startswith("--") and quoted != word else quoted


def shell_join(command: list[str]) -> str:
  """`command` as one shell line (`shlex.split` gives it back)."""
  return " ".join(shell_word(word) for word in command)
