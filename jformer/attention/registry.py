"""The registry that maps a config string (`model.attention`) to an attention variant."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Callable

import jax

from jformer.ops.attention import repeat_kv

# Features a variant may support; the model asks for them and `check` refuses what is missing.
#   causal       key j visible to query i only if position(j) <= position(i)
#   segment_ids  padding (id 0) and packed rows (several examples per row, attending within their own)
#   positions    explicit query/key positions (packed rows, decode steps); default `arange`
#   mask         an extra boolean mask broadcastable to [B, H, T, S]
#   bias         an additive logits bias broadcastable to [B, H, T, S] (ALiBi, relative positions), differentiable
#   dropout      dropout on the attention weights
#   decode       a decode step: T=1 query against a key/value cache of S slots
#   gqa          key/value with K heads, H % K == 0 (grouped-query / multi-query attention)
FEATURES = ("causal", "segment_ids", "positions", "mask", "bias", "dropout", "decode", "gqa")

# The keyword arguments of the one variant signature (see `jformer/attention/__init__.py`), with their defaults.
SIGNATURE = dict(causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None, kv_positions=None,
                 mask=None, bias=None, dropout_rate=0.0, dropout_rng=None)


@dataclasses.dataclass(frozen=True)
class AttentionVariant:
  """A registered attention function and what it supports.

  Attributes:
    name: the config string.
    fn: the function to call (signature in `jformer/attention/__init__.py`): the variant's own function behind
      shape checks, a refusal of features it does not support, and the repetition of key/value heads when the
      variant does not take fewer key/value heads than query heads itself.
    supports: subset of FEATURES. Always holds "gqa": the registry repeats key/value heads where needed.
    options: names of the keyword options it accepts (from `model.attention_options`).
    required_options: the options without a default, which the config must set.
    native_gqa: whether the variant itself takes key/value with fewer heads (it declared "gqa"); if not,
      `fn` repeats the key/value heads before calling it.
    doc: one line for `jformer attention list`.
    reference: for a variant that is not softmax attention, its explicit formula (same signature), against
      which the test matrix checks it; None = the softmax reference (`dot_product`).
  """
  name: str
  fn: Callable
  supports: frozenset
  options: tuple = ()
  required_options: tuple = ()
  native_gqa: bool = False
  doc: str = ""
  reference: Callable | None = None

  def check(self, *, needs: set[str] = frozenset(), options: dict | None = None) -> None:
    """Raises ValueError if this variant lacks a needed feature, or (when `options` is given) does not know an
    option or misses a required one."""
    missing = sorted(set(needs) - self.supports)
    if missing:
      raise ValueError(f"attention variant '{self.name}' does not support {missing}; it supports "
                       f"{sorted(self.supports)}. Pick another variant (known: {available()}) or turn the "
                       "feature off (e.g. model.attention_dropout_rate=0).")
    if options is None:
      return
    unknown = sorted(set(options) - set(self.options))
    if unknown:
      raise ValueError(f"attention variant '{self.name}' has no option(s) {unknown}; its options are "
                       f"{sorted(self.options) or 'none'}")
    absent = sorted(set(self.required_options) - set(options))
    if absent:
      raise ValueError(f"attention variant '{self.name}' needs option(s) {absent}; set e.g. "
                       f"--config.model.attention_options.{absent[0]}=...")


_REGISTRY: dict[str, AttentionVariant] = {}


def register(name: str, *, supports, doc: str = "", reference: Callable | None = None):
  """Decorator: `@register("my_variant", supports={"causal", "segment_ids"})` above the function.

  The function takes the full signature; its extra keyword-only parameters are its options (from
  `model.attention_options`), required when they have no default. It only sees the features it declares:
  a call asking for another one is refused here, with the feature named. `reference`: the explicit formula
  of a variant that is not softmax attention, for the tests.
  """
  unknown = set(supports) - set(FEATURES)
  if unknown:
    raise ValueError(f"unknown features {sorted(unknown)} for '{name}'; features are {FEATURES}")

  def wrap(fn):
    if name in _REGISTRY:
      raise ValueError(f"attention variant '{name}' is registered twice")
    parameters = inspect.signature(fn).parameters
    lacking = sorted(set(SIGNATURE) - set(parameters))
    if lacking:
      raise ValueError(f"attention variant '{name}' must accept the keyword arguments {lacking} (the one "
                       "signature, see jformer/attention/__init__.py)")
    options = [p for p in parameters.values() if p.kind == p.KEYWORD_ONLY and p.name not in SIGNATURE]
    _REGISTRY[name] = AttentionVariant(
        name, _guarded(name, fn, frozenset(supports)), frozenset(supports) | {"gqa"},
        options=tuple(p.name for p in options),
        required_options=tuple(p.name for p in options if p.default is inspect.Parameter.empty),
        native_gqa="gqa" in supports, doc=doc or (fn.__doc__ or "").strip().splitlines()[0], reference=reference)
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


def requested_features(*, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
                       kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None) -> set[str]:
  """The FEATURES a call with these keyword arguments uses (decode and gqa are shapes, not arguments)."""
  del dropout_rng
  used = {"causal"} if causal else set()
  if q_segment_ids is not None or kv_segment_ids is not None:
    used.add("segment_ids")
  if q_positions is not None or kv_positions is not None:
    used.add("positions")
  if mask is not None:
    used.add("mask")
  if bias is not None:
    used.add("bias")
  if dropout_rate > 0:
    used.add("dropout")
  return used


def check_shapes(name: str, query: jax.Array, key: jax.Array, value: jax.Array) -> None:
  """Raises ValueError unless query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` with H % K == 0."""
  if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
    raise ValueError(f"attention variant '{name}' expects [batch, length, heads, head_dim] arrays; got query "
                     f"{query.shape}, key {key.shape}, value {value.shape}")
  if (query.shape[0] != key.shape[0] or query.shape[-1] != key.shape[-1] or key.shape[:3] != value.shape[:3]
      or query.shape[2] % key.shape[2]):
    raise ValueError(f"attention variant '{name}': query {query.shape}, key {key.shape} and value {value.shape} "
                     "do not match: query and key need the same batch and head_dim, key and value the same "
                     "[batch, length, heads], and the query heads must be a multiple of the key/value heads")


def _guarded(name: str, fn: Callable, declared: frozenset) -> Callable:
  """`fn` behind shape checks, the refusal of undeclared features, and key/value head repetition."""

  @functools.wraps(fn)
  def call(query, key, value, **kwargs):
    check_shapes(name, query, key, value)
    arguments = {k: kwargs.pop(k) for k in SIGNATURE if k in kwargs}
    refused = sorted(requested_features(**arguments) - declared)
    if refused:
      raise ValueError(f"attention variant '{name}' does not support {refused}, which this call asks for; it "
                       f"supports {sorted(declared | {'gqa'})}. Pick another variant (known: {available()}).")
    if "gqa" not in declared:
      key, value = repeat_kv(key, query.shape[2]), repeat_kv(value, query.shape[2])
    return fn(query, key, value, **arguments, **kwargs)

  return call
