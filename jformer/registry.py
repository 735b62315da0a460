"""One small registry class for every kind of plug-in (attention variants and kernels, positional encodings,
datasets, tasks), and the declaration of a plug-in's learned parameters.

A `Registry` maps a config string to an entry. Every kind registers the same way, with `REGISTRY.register(name,
**declaration)` above a function or class; the kind turns the declaration into its entry (`declare`), so an
attention variant's entry holds what it supports, a task's entry its model. An unknown name is refused with the
known ones listed; a name registered twice is refused naming both places, unless it is the same registration run
again (one file loaded twice: once by `import`, once by path from `config.imports`). Tests and notebooks add
entries for one block with `temporary()`. `kinds()` lists every registry by kind (`jformer list`).

A plug-in that learns something declares its parameters as `Param`s; the Flax module that uses it creates them
(`jformer.models.plugin_params.create`), so the plug-in's math stays a pure function of explicit arrays.

This module sits below every layer of jformer and imports none of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import inspect
import os
import sys
from typing import Any, Callable, Generic, Iterator, Mapping, TypeVar

import jax
import jax.numpy as jnp

Entry = TypeVar("Entry")

_KINDS: dict[str, Registry] = {}
_GENERATION = [0]  # bumped whenever any registry changes: what was resolved from names before may be stale.


class Registry(Generic[Entry]):
  """name -> entry, for one kind of plug-in (`kind` names it in messages, e.g. "attention variant").

  Args:
    kind: what an entry is, e.g. "attention variant"; one registry per kind (`kinds()`).
    declare: `declare(name, obj, **declaration) -> entry`, the kind's reading of a registration (checks and
      the entry); default: the registered object itself.
    patterns: a name may be a glob ("wmt*_translate/*") that `get` matches after the exact names.
    details: `details(entry) -> str`, what `jformer list` prints under an entry's one-line doc (e.g. the features
      a variant supports); default none.
  """

  def __init__(self, kind: str, *, declare: Callable[..., Entry] | None = None, patterns: bool = False,
               details: Callable[[Entry], str] | None = None):
    if kind in _KINDS:
      raise ValueError(f"a registry of kind '{kind}' exists already ({_KINDS[kind]!r})")
    self.kind = kind
    self._declare = declare or (lambda name, obj: obj)
    self._patterns = patterns
    self._details = details or (lambda entry: "")
    self._entries: dict[str, Entry] = {}
    self._origins: dict[str, str] = {}
    self._identities: dict[str, tuple[str, str, str]] = {}  # name -> what makes a registration the same (`_identity`).
    _KINDS[kind] = self

  def __repr__(self) -> str:
    return f"Registry({self.kind!r}, {len(self._entries)} entries)"

  def register(self, name: str, *, origin: str | None = None, **declaration) -> Callable:
    """Decorator: registers the function or class below it as `name`, read by the kind's `declare`. `origin`:
    where the registration is written ("file:line"; default the caller, `caller()` from a kind's own wrapper)."""
    origin = origin or _origin(sys._getframe(1))

    def wrap(obj):
      self.add(name, self._declare(name, obj, **declaration), origin=origin, registers=obj)
      return obj

    return wrap

  def add(self, name: str, entry: Entry, *, origin: str | None = None, registers: Any = None) -> Entry:
    """Registers `entry` as `name`; a name registered twice is an error naming both places (two plug-ins would
    shadow each other). `origin`: where it is registered ("file:line"), default the caller; `registers`: the
    object registered (default `entry`). The same registration run again (the same file and line registering an
    object of the same qualified name: a file imported as a module and again by path) replaces the entry, as a
    module reload would."""
    origin = origin or _origin(sys._getframe(1))
    identity = _identity(origin, entry if registers is None else registers)
    if name in self._entries and self._identities[name] != identity:
      raise ValueError(f"{self.kind} '{name}' is registered twice: at {self._origins[name]} and at {origin}; "
                       "rename one of them, or import the file once (a file named in config.imports is not "
                       "also imported by another plug-in)")
    self._entries[name] = entry
    self._origins[name] = origin
    self._identities[name] = identity
    _GENERATION[0] += 1
    return entry

  def get(self, name: str) -> Entry:
    """The entry of `name`; an unknown name raises a KeyError listing the known ones."""
    if name in self._entries:
      return self._entries[name]
    if self._patterns:
      for pattern, entry in self._entries.items():
        if fnmatch.fnmatchcase(name, pattern):
          return entry
    raise KeyError(f"unknown {self.kind} '{name}'; known: {self.available()} (a plug-in of your own is loaded "
                   "with --config.imports=path/to/file.py)")

  def available(self) -> list[str]:
    """Sorted registered names."""
    return sorted(self._entries)

  def items(self) -> list[tuple[str, Entry]]:
    """(name, entry) pairs, sorted by name."""
    return sorted(self._entries.items())

  def origin(self, name: str) -> str:
    """Where `name` was registered ("file:line")."""
    self.get(name)
    return self._origins[name]

  def doc(self, name: str) -> str:
    """The entry's one-line description (its `doc`, or its docstring's first line)."""
    entry = self.get(name)
    return getattr(entry, "doc", "") or first_line(entry.__doc__)

  def details(self, name: str) -> str:
    """What `jformer list` says about the entry besides its doc (its kind's `details`)."""
    return self._details(self.get(name))

  def __contains__(self, name: str) -> bool:
    return name in self._entries

  @contextlib.contextmanager
  def temporary(self) -> Iterator[Registry]:
    """Within the block, entries may be registered (e.g. by a test); they are dropped when it ends."""
    entries, origins, identities = dict(self._entries), dict(self._origins), dict(self._identities)
    try:
      yield self
    finally:
      self._entries, self._origins, self._identities = entries, origins, identities
      _GENERATION[0] += 1


def generation() -> int:
  """A number that changes whenever an entry is added to (or dropped from) any registry: a cache of what names
  resolved to is valid while it stays the same."""
  return _GENERATION[0]


def kinds() -> dict[str, Registry]:
  """Every registry, by kind (those of the modules imported so far)."""
  return dict(sorted(_KINDS.items()))


def caller(depth: int = 1) -> str:
  """'file:line' of the caller of the function that calls this (`depth` frames further up): where a kind's
  `register(...)` wrapper was written, for `Registry.register(origin=...)`."""
  return _origin(sys._getframe(depth + 1))


def _origin(frame) -> str:
  """'file:line' of `frame` (`place`)."""
  return place(frame.f_code.co_filename, frame.f_lineno)


def place(path: str, line: int) -> str:
  """'file:line', the file relative to the working directory when under it: where a plug-in's code is."""
  try:
    relative = os.path.relpath(path)
    path = path if relative.startswith("..") else relative
  except ValueError:  # another drive (Windows)
    pass
  return f"{path}:{line}"


def _identity(origin: str, obj: Any) -> tuple[str, str, str]:
  """(real path of the registering file, line, qualified name of the object registered): equal for one
  registration however its file was loaded (`origin` is relative to the working directory or absolute)."""
  path, _, line = origin.rpartition(":")
  return os.path.realpath(path), line, getattr(obj, "__qualname__", type(obj).__qualname__)


def option_type(parameter: inspect.Parameter) -> type | None:
  """How a plug-in's keyword option is checked: int (a positive int: sizes, windows, chunks) or float (a number),
  from its default or, for a required option, its annotation; None (unchecked) otherwise."""
  default = parameter.default
  if default is inspect.Parameter.empty:
    return {"int": int, "float": float, int: int, float: float}.get(parameter.annotation)
  return type(default) if type(default) in (int, float) else None


def check_options(plugin: str, group: str, options: Mapping[str, Any], option_types: Mapping[str, type | None],
                  given: Mapping[str, Any]) -> None:
  """Refuses options `given` to `plugin` (e.g. "attention variant 'local'") that it does not have, required ones
  it lacks (`options`: {name: default}, `inspect.Parameter.empty` when required) and values of the wrong type,
  naming them and the config `group` that sets them (e.g. "model.attention_options")."""
  unknown = sorted(set(given) - set(options))
  if unknown:
    raise ValueError(f"{plugin} has no option(s) {unknown}; its options are {sorted(options) or 'none'}")
  absent = sorted(n for n, default in options.items() if default is inspect.Parameter.empty and n not in given)
  if absent:
    raise ValueError(f"{plugin} needs option(s) {absent}; set e.g. --config.{group}.{absent[0]}=...")
  for option, value in given.items():
    kind = option_types.get(option)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
      raise ValueError(f"{plugin} needs a positive int {option}, got {value!r} (--config.{group}.{option})")
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
      raise ValueError(f"{plugin} needs a number for {option}, got {value!r} (--config.{group}.{option})")


def first_line(doc: str | None) -> str:
  """The first line of a docstring ('' for none): a plug-in's one-line description."""
  return next(iter((doc or "").strip().splitlines()), "")


Initializer = Callable[[jax.Array, tuple, Any], jax.Array]


def constant(value: float) -> Initializer:
  """An initializer filling the parameter with `value` (e.g. a temperature's starting log)."""
  return lambda key, shape, dtype=jnp.float32: jnp.full(shape, value, dtype)


@dataclasses.dataclass(frozen=True)
class Param:
  """A learned parameter a plug-in declares.

  Attributes:
    shape: one entry per dimension: an int, or a name looked up in the dimensions the model passes (e.g.
      "heads", "kv_heads", "head_dim", "d_model", "max_length") or among the plug-in's options (e.g. an
      additive scorer's "hidden_size").
    init: `init(key, shape, dtype) -> array`, e.g. `jax.nn.initializers.lecun_normal()`.
    axes: logical axis names, one per dimension, mapped to mesh axes by `jformer.axes.RULES`
      (e.g. "heads" -> tensor parallelism); None = the dimension names (a name without a rule is replicated).
  """
  shape: tuple
  init: Initializer
  axes: tuple | None = None

  def resolve(self, dims: Mapping[str, int]) -> tuple[int, ...]:
    """The concrete shape for `dims` (model dimensions and options); an unknown name is an error."""
    shape = []
    for dim in self.shape:
      if isinstance(dim, str):
        if dim not in dims:
          raise ValueError(f"parameter dimension '{dim}' is neither a model dimension nor an option; known: "
                           f"{sorted(dims)}")
        dim = dims[dim]
      if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"parameter dimensions must be positive ints, got {dim!r} in {self.shape}")
      shape.append(dim)
    return tuple(shape)

  def logical_axes(self) -> tuple:
    """Logical axis names, one per dimension (an int dimension without `axes` has no name: replicated)."""
    if self.axes is not None:
      if len(self.axes) != len(self.shape):
        raise ValueError(f"axes {self.axes} do not name the {len(self.shape)} dimensions of shape {self.shape}")
      return tuple(self.axes)
    return tuple(dim if isinstance(dim, str) else None for dim in self.shape)


def init_params(specs: Mapping[str, Param], dims: Mapping[str, int], rng: jax.Array) -> dict[str, jax.Array]:
  """Concrete float32 parameters for `specs` outside any module (tests, benchmarks): one key per parameter."""
  keys = jax.random.split(rng, max(len(specs), 1))
  return {name: spec.init(key, spec.resolve(dims), jnp.float32) for key, (name, spec) in zip(keys, sorted(specs.items()))}
