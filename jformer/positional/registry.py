"""The registry that maps a config string (`model.positional`) to a positional encoding, and how each acts."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Mapping

from jformer.registry import Param, Registry, caller, check_options, first_line, option_type

# How an encoding acts -> (its function's inputs, its keyword arguments besides its options); the function
# signatures and shapes are documented in `jformer/positional/__init__.py`.
ACTS = {
    "embedding": (("positions",), ("dims", "params")),
    "rotary": (("x", "positions"), ("dims", "params")),
    "bias": (("q_positions", "kv_positions"), ("causal", "dims", "params")),
    "none": ((), ()),
}


@dataclasses.dataclass(frozen=True)
class PositionalEncoding:
  """A registered positional encoding and how it acts.

  Attributes:
    name: the config string (`model.positional`).
    acts: a key of ACTS: "embedding" (added to the token embeddings), "rotary" (rotates self-attention queries
      and keys), "bias" (added to self-attention logits) or "none".
    fn: the function (signature by `acts` in `jformer/positional/__init__.py`); None when it acts "none".
    params: the learned parameters it declares, name -> `Param`; the model creates them (in the stack's
      `positions` module for "embedding", its `position_bias` module for "bias", each self-attention for
      "rotary") and passes them as `params`.
    options: its keyword options (from `model.positional_options`) with their defaults.
    option_types: {option: int, float or None}: an int option takes a positive int, a float one a number.
    example_options: option values for small test models (lengths up to 32) that exercise the options.
    doc: one line for `jformer positional list`.
    check_fn: `check_fn(dims, options)` raises ValueError naming a combination the encoding cannot run
      (options with defaults filled in); None = any.
  """
  name: str
  acts: str
  fn: Callable | None
  params: Mapping[str, Param] = dataclasses.field(default_factory=dict)
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  option_types: Mapping[str, type | None] = dataclasses.field(default_factory=dict)
  example_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  doc: str = ""
  check_fn: Callable | None = None

  def with_defaults(self, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` with the defaults of the ones not given."""
    return {**self.options, **options}

  def check(self, dims: Mapping[str, int], options: Mapping[str, Any], *,
            group: str = "model.positional_options") -> None:
    """Raises ValueError on an unknown option, a combination of model dimensions (`dims`: d_model, heads, ...) and
    options the encoding cannot run, or a parameter whose shape they do not give; `group`: the config key that
    sets the options (a layer kind's own, `model.layer_kinds.<kind>.positional_options`)."""
    check_options(f"positional encoding '{self.name}'", group, self.options, self.option_types, options)
    resolved = self.with_defaults(options)
    if self.check_fn is not None:
      self.check_fn(dims, resolved)
    for param in self.params.values():
      param.resolve({**dims, **resolved})


def _declare(name: str, fn: Callable, *, acts: str, params: Mapping[str, Param] | None = None,
             check: Callable | None = None, example_options: Mapping[str, Any] | None = None,
             doc: str = "") -> PositionalEncoding:
  """The entry of an encoding registered with `register` (checks its declaration against its function)."""
  if acts not in ACTS:
    raise ValueError(f"positional encoding '{name}': acts='{acts}' is not one of {sorted(ACTS)}")
  if acts == "none" and params:
    raise ValueError(f"positional encoding '{name}' acts 'none' and so has nothing to learn; drop its params")
  options, types = _options(name, acts, fn)
  unknown = sorted(set(example_options or {}) - set(options))
  if unknown:
    raise ValueError(f"positional encoding '{name}': example_options {unknown} are not among its options "
                     f"{sorted(options) or 'none'}")
  return PositionalEncoding(name, acts, None if acts == "none" else fn, dict(params or {}), options, types,
                            dict(example_options or {}), doc or first_line(fn.__doc__), check)


REGISTRY: Registry[PositionalEncoding] = Registry("positional encoding", declare=_declare,
                                                  details=lambda encoding: f"acts: {encoding.acts}")


def register(name: str, *, acts: str, params: Mapping[str, Param] | None = None, check: Callable | None = None,
             example_options: Mapping[str, Any] | None = None, doc: str = ""):
  """Decorator: `@register("my_encoding", acts="embedding")` above its function.

  The function takes the signature of its kind (ACTS; `jformer/positional/__init__.py`); its extra keyword-only
  parameters are its options (from `model.positional_options`), each with a default. An encoding that acts
  "none" decorates a function without parameters, which is never called: its docstring is the doc.
  `params`: its learned parameters; `check(dims, options)`: raises ValueError naming what a config must change.
  """
  return REGISTRY.register(name, origin=caller(), acts=acts, params=params, check=check,
                           example_options=example_options, doc=doc)


def get(name: str) -> PositionalEncoding:
  """The encoding registered as `name`; an unknown name raises a KeyError listing the known ones."""
  return REGISTRY.get(name)


def available() -> list[str]:
  """Sorted names of the registered encodings."""
  return REGISTRY.available()


def _options(name: str, acts: str, fn: Callable) -> tuple[dict[str, Any], dict[str, type | None]]:
  """The options of `fn` (its keyword-only parameters besides the kind's) with their defaults and checked types,
  after checking its signature."""
  inputs, keywords = ACTS[acts]
  parameters = list(inspect.signature(fn).parameters.values())
  leading = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  keyword_only = {p.name: p for p in parameters if p.kind == p.KEYWORD_ONLY}
  if len(leading) != len(inputs) or set(keywords) - set(keyword_only) or len(leading) + len(keyword_only) != len(
      parameters):
    expected = ", ".join([*inputs, "*", *keywords, "<options>"] if inputs or keywords else [])
    raise ValueError(f"positional encoding '{name}' acts '{acts}', so its function takes ({expected}), its "
                     f"options keyword-only with defaults; got {inspect.signature(fn)}")
  options = {option: p.default for option, p in keyword_only.items() if option not in keywords}
  required = sorted(option for option, default in options.items() if default is inspect.Parameter.empty)
  if required:
    raise ValueError(f"positional encoding '{name}': option(s) {required} need a default (a model runs with the "
                     "defaults of the options model.positional_options does not set)")
  return options, {option: option_type(keyword_only[option]) for option in options}
