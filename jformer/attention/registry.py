"""The registry that maps a config string (`model.attention`) to an attention variant."""

from __future__ import annotations

import dataclasses
from typing import Callable

# Features a variant may support; the model asks for them and `check` refuses what is missing.
FEATURES = ("causal", "segment_ids", "positions", "mask", "bias", "dropout", "decode")


@dataclasses.dataclass(frozen=True)
class AttentionVariant:
  """A registered attention function and what it supports.

  Attributes:
    name: the config string.
    fn: the pure function (signature in `jformer/attention/__init__.py`).
    supports: subset of FEATURES.
    options: names of the keyword options it accepts (from `model.attention_options`).
    doc: one line for `jformer attention list`.
  """
  name: str
  fn: Callable
  supports: frozenset
  options: tuple = ()
  doc: str = ""

  def check(self, *, needs: set[str] = frozenset(), options: dict | None = None) -> None:
    """Raises ValueError if this variant lacks a needed feature or does not know an option."""
    missing = sorted(set(needs) - self.supports)
    if missing:
      raise ValueError(f"attention variant '{self.name}' does not support {missing}; it supports "
                       f"{sorted(self.supports)}. Pick another variant (known: {available()}) or turn the "
                       "feature off (e.g. model.attention_dropout_rate=0).")
    unknown = sorted(set(options or {}) - set(self.options))
    if unknown:
      raise ValueError(f"attention variant '{self.name}' has no option(s) {unknown}; its options are "
                       f"{sorted(self.options) or 'none'}")


_REGISTRY: dict[str, AttentionVariant] = {}


def register(name: str, *, supports, options=(), doc: str = ""):
  """Decorator: `@register("my_variant", supports={"causal", "mask"})` above the function."""
  unknown = set(supports) - set(FEATURES)
  if unknown:
    raise ValueError(f"unknown features {sorted(unknown)} for '{name}'; features are {FEATURES}")

  def wrap(fn):
    if name in _REGISTRY:
      raise ValueError(f"attention variant '{name}' is registered twice")
    _REGISTRY[name] = AttentionVariant(name, fn, frozenset(supports), tuple(options),
                                       doc or (fn.__doc__ or "").strip().splitlines()[0])
    return fn

  return wrap


def get(name: str) -> AttentionVariant:
  """The variant registered as `name`; an unknown name raises a KeyError listing the known ones."""
  try:
    return _REGISTRY[name]
  except KeyError:
    raise KeyError(f"unknown attention variant '{name}'; known variants: {available()}") from None


def available() -> list[str]:
  """Sorted names of the registered variants."""
  return sorted(_REGISTRY)
