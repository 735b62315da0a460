"""How a config field is declared, once: its default, meaning, allowed values, least value, and whether it belongs
to the run's identity.

Each section of a config is a frozen dataclass whose fields are declared with `field(...)`: the model section is
`jformer.models.TransformerConfig` (the frozen config the modules read), the others live in
`jformer.config.schema`. From these declarations come the default config (`jformer.config.base_config`), the
validation of every value (`check_value`), the keys a resumed run may not change, and the config reference page
(docs/config.md).

This module sits below every layer of jformer and imports none of it.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from jformer import registry


@dataclasses.dataclass(frozen=True)
class Registered:
  """Allowed values: the names in the registry of plug-in `kind` (e.g. "attention variant"), read when a config is
  validated, so plug-ins loaded by `config.imports` count."""
  kind: str

  def names(self) -> list[str]:
    return registry.kinds()[self.kind].available()

  def check(self, value: str) -> None:
    registry.kinds()[self.kind].get(value)  # KeyError listing the known names (patterns match too).


@dataclasses.dataclass(frozen=True)
class Spec:
  """A field's declaration (the metadata of `field`).

  Attributes:
    doc: one line: what it sets and the paper's value where there is one.
    choices: the allowed values: a tuple (held by the code that reads the field), a `Registered` kind, or None.
    at_least: the least allowed value of a number; None for none.
    identity: part of the run's identity: its parameters, vocabulary or data position depend on it, so a resumed
      or loaded run may not change it.
    group: a group of options whose keys the chosen plug-in defines (e.g. `model.attention_options`).
  """
  doc: str
  choices: tuple | Registered | None = None
  at_least: float | None = None
  identity: bool = False
  group: bool = False


def field(default: Any, doc: str, *, choices: tuple | Registered | None = None, at_least: float | None = None,
          identity: bool = False, group: bool = False) -> Any:
  """A dataclass field with its declaration (`Spec`); a group's default is an empty tuple of (option, value)."""
  return dataclasses.field(default=default, metadata={"spec": Spec(doc, choices, at_least, identity, group)})


@dataclasses.dataclass(frozen=True)
class Field:
  """One declared field of a section, as `fields` lists them."""
  name: str
  type: Any
  default: Any
  spec: Spec


def fields(section: type) -> list[Field]:
  """The declared fields of a section dataclass, in declaration order."""
  hints = typing.get_type_hints(section)
  return [Field(f.name, hints[f.name], f.default, f.metadata["spec"]) for f in dataclasses.fields(section)
          if "spec" in f.metadata]


def describe_choices(choices: tuple | Registered | None) -> str:
  """The allowed values as a reader sees them."""
  if isinstance(choices, Registered):
    return f"a registered {choices.kind} ({', '.join(choices.names())})"
  return ", ".join(repr(c) for c in choices) if choices else ""


def check_value(key: str, field_: Field, value: Any) -> str | None:
  """Why `value` is not allowed for `field_` (named `key`), None if it is."""
  expected = _plain_type(field_.type)
  if expected is not None and not _is_instance(value, expected):
    return f"{key}={value!r} is a {type(value).__name__}; it takes a {expected.__name__}, e.g. {field_.default!r}"
  spec = field_.spec
  if spec.at_least is not None and value < spec.at_least:
    return f"{key}={value} must be at least {spec.at_least:g}"
  if isinstance(spec.choices, Registered):
    try:
      spec.choices.check(value)
    except KeyError as e:
      return f"{key}: {e.args[0]}"
  elif spec.choices and value not in spec.choices:
    return f"{key}={value!r} is not one of {describe_choices(spec.choices)}"
  return None


def _plain_type(annotation) -> type | None:
  """int, float, str, bool or tuple for an annotation of one of them; None for others (not checked here)."""
  origin = typing.get_origin(annotation) or annotation
  return origin if origin in (int, float, str, bool, tuple) else None


def _is_instance(value: Any, expected: type) -> bool:
  if expected is float:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
  if expected is int:
    return isinstance(value, int) and not isinstance(value, bool)
  if expected is tuple:
    return isinstance(value, (tuple, list))
  return isinstance(value, expected)

