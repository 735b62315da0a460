"""The registry that maps a config string (`model.attention`) to an attention variant, and everything every
variant shares: the one signature, the feature checks, option checks, learned parameters, attention weights."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import numbers
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp

from jformer.attention import capture as capture_lib
from jformer.attention.capture import Capture
from jformer.attention import context_parallel
from jformer.attention.decode_state import FULL, DecodeState
from jformer.ops.attention import dot_product_weights, repeat_kv
from jformer.ops.masks import attention_mask
from jformer.registry import Param, Registry, caller, check_options, first_line, option_type

# Features a variant may support; the model asks for them and `check` refuses what is missing.
#   causal       key j visible to query i only if position(j) <= position(i)
#   segment_ids  padding (id 0) and packed rows (several examples per row, attending within their own)
#   positions    explicit query/key positions (packed rows, decode steps); default `arange`
#   mask         an extra boolean mask broadcastable to [B, H, T, S]
#   bias         an additive logits bias broadcastable to [B, H, T, S] (ALiBi, relative positions), differentiable
#   dropout      dropout on the attention weights
#   decode       a decode step: T=1 query against a key/value cache of S slots
#   gqa          key/value with K heads, H % K == 0 (grouped-query / multi-query attention), taken as they are;
#                every variant accepts K < H: for one that does not declare it the registry repeats the heads
#   softcap      `logits_softcap` > 0: the logits (before the bias) become cap * tanh(logits / cap) (Gemma 2)
#   window       `window=(left, right)`: key j visible to query i only if position(i) - left <= position(j) <=
#                position(i) + right (sliding window: `local`, Mistral, Gemma 2; `ops.masks.window_mask`)
FEATURES = ("causal", "segment_ids", "positions", "mask", "bias", "dropout", "decode", "gqa", "softcap", "window")

# The keyword arguments of the one variant signature (see `jformer/attention/__init__.py`), with their defaults.
MASKING = dict(causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None, kv_positions=None,
               mask=None, bias=None, window=None)
SIGNATURE = dict(MASKING, dropout_rate=0.0, dropout_rng=None, logits_softcap=0.0)

# Arguments of the signature that only a variant declaring their feature takes (and sees): the variants written
# before the feature existed keep their signature, and a call asking for the feature is refused by them as usual.
FEATURE_ARGUMENTS = {"logits_softcap": "softcap", "window": "window"}

# Keyword arguments a variant function may take that are not options: its declared parameters and captured
# per-token tensors, and the mesh a kernel runs per device on (`jformer.axes.Placement`, or None).
RESERVED = ("params", "captures", "mesh")

# The model dimensions a parameter shape may name (besides the variant's options).
MODEL_DIMS = ("heads", "kv_heads", "head_dim", "d_model")


def softmax_weights(query, key, **masking) -> jax.Array:
  """softmax(cap(Q K^T / sqrt(d_k)) + bias) over the visible keys (paper eq. 1; cap: the soft-cap `logits_softcap`,
  off at 0): `[B, H, T, S]` float32.

  The attention weights of every softmax variant (dot_product, chunked, xla, cudnn, splash, pallas_gpu, auto): their
  `weights=`. `masking`: the masking arguments of the signature; options are ignored.
  """
  visible = attention_mask(query.shape[1], key.shape[1], **{k: masking.get(k, v) for k, v in MASKING.items()
                                                              if k != "bias"})
  return dot_product_weights(query, key, mask=visible, bias=masking.get("bias"),
                             softcap=masking.get("logits_softcap", 0.0))


@dataclasses.dataclass(frozen=True)
class AttentionVariant:
  """A registered attention function and what it supports.

  Attributes:
    name: the config string.
    fn: the function to call, `fn(query, key, value, **signature, [params=...], **options)`: the variant's own
      function behind shape, feature, option and parameter checks, and the repetition of key/value heads for a
      variant that does not declare "gqa".
    supports: subset of FEATURES; always holds "gqa".
    options: {option name: default} of its keyword options (`model.attention_options`); `inspect.Parameter.empty`
      for a required one.
    option_types: {option name: int, float or None}: an int option takes a positive int (sizes, windows,
      chunks), a float option a number; from the default, or the annotation of a required option.
    params: {name: Param}: the learned parameters it reads (`params=` argument); MultiHeadAttention creates them.
    captures: {name: Capture}: the per-token tensors it reads (`captures=` argument), which MultiHeadAttention
      computes from the layer's input (`jformer.attention.capture`).
    weights: `weights(query, key, **masking, [params=...], **options) -> [B, H, T, S]`, the attention weights it
      applies to the values (attention maps, and the reference below), or None if it has none.
    reference: `reference(query, key, value, **signature, [params=...], **options)`, the explicit formula the
      test matrix checks `fn` against: by default the weights times the values.
    example_options: options that make it run at test sizes (the tests use them all; sweeps and benchmarks take
      only the values of required options from them, `runnable_options`).
    doc: one line for `jformer list attention`.
    platforms: the JAX backends it is built for (e.g. {"gpu"}: a cuDNN or Triton kernel), None for any; elsewhere
      it may refuse (cuDNN) or run slowly (a Pallas kernel in the interpreter).
    limits: `limits(query, key, value, **masking) -> str | None`: why it cannot run a call of these shapes,
      dtypes, backend or argument values (a declared feature it takes only in some form), None if it can; the
      call is then refused naming the reason, and `auto` falls back to the next kernel.
    auto_priority: for a library kernel, its rank among its backend's kernels when `auto` chooses (highest first);
      None for a variant `auto` never picks.
    decode_state: what it keeps between decode steps (`jformer.attention.decode_state`): every key and value
      (FULL), those of a window, or a recurrent state of its own.
    reads_positions: it reads absolute positions (a flex variant's own functions may), so the model passes them
      even where the index and the segment ids imply its masking (packed training rows), where it drops them for
      the others so that the library kernels take the call.
    splits_sequence: its function takes the `mesh` and runs a sequence split over it itself (`splash`; `auto` and
      `local` pass the mesh to the kernel they run); the others run there under `context_parallel`.
  """
  name: str
  fn: Callable
  supports: frozenset
  options: Mapping[str, Any]
  option_types: Mapping[str, type | None]
  params: Mapping[str, Param]
  weights: Callable | None
  reference: Callable
  example_options: Mapping[str, Any]
  doc: str
  platforms: frozenset | None = None
  limits: Callable | None = None
  auto_priority: int | None = None
  decode_state: DecodeState = FULL
  captures: Mapping[str, Capture] = dataclasses.field(default_factory=dict)
  reads_positions: bool = False
  splits_sequence: bool = False

  @property
  def required_options(self) -> tuple[str, ...]:
    return tuple(sorted(n for n, default in self.options.items() if default is inspect.Parameter.empty))

  def runnable_options(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The options to run this variant with where nobody chose them (sweeps over variants, benchmarks).

    The rule: its defaults (not returned: they apply by themselves), plus, for each required option, its
    `example_options` value, under `overrides` (the user's choice). So a variant with a required option runs in
    every sweep and benchmark with no table of per-variant options to edit. Checked like a config's options:
    an unknown override raises ValueError naming it.
    """
    options = {**{n: self.example_options[n] for n in self.required_options}, **(overrides or {})}
    _check_options(self.name, self.options, self.option_types, options)
    return options

  def check(self, *, needs: set[str] = frozenset(), options: Mapping[str, Any] | None = None,
            dims: Mapping[str, int] | None = None, group: str = "model.attention_options") -> None:
    """Raises ValueError if this variant lacks a needed feature; when `options` is given, if it does not know an
    option, misses a required one or gets a value of the wrong type (named as keys of `group`, the config key that
    sets them: a layer kind's own is `model.layer_kinds.<kind>.attention_options`); when `dims` (model
    dimensions) is given too, if a parameter shape cannot be built from them."""
    missing = sorted(set(needs) - self.supports)
    if missing:
      raise ValueError(f"attention variant '{self.name}' does not support {missing}; it supports "
                       f"{sorted(self.supports)}. Pick another variant (known: {available()}) or turn the "
                       "feature off (e.g. model.attention_dropout_rate=0).")
    if options is None:
      return
    _check_options(self.name, self.options, self.option_types, options, group)
    if dims is not None:
      self.param_shapes(dims, options)

  def refusal(self, query, key, value, **masking) -> str | None:
    """Why this variant cannot run `fn(query, key, value, **masking)` (an undeclared feature, or its `limits`),
    None if it can; nothing is computed. What `auto` asks each kernel before choosing it."""
    masking = {k: v for k, v in masking.items() if k in SIGNATURE}
    missing = sorted(requested_features(**masking) - self.supports)
    if missing:
      return f"does not support {missing}"
    return None if self.limits is None else self.limits(query, key, value, **_declared(self.supports, masking))

  def param_dims(self, dims: Mapping[str, int], options: Mapping[str, Any]) -> dict[str, Any]:
    """The names a parameter shape may use: model `dims` (MODEL_DIMS), the options given, their defaults."""
    return {**{n: d for n, d in self.options.items() if d is not inspect.Parameter.empty}, **options, **dims}

  def param_shapes(self, dims: Mapping[str, int], options: Mapping[str, Any]) -> dict[str, tuple]:
    """{name: shape} of the learned parameters for model `dims` (MODEL_DIMS) and `options`."""
    sizes = self.param_dims(dims, options)
    try:
      return {name: spec.resolve(sizes) for name, spec in self.params.items()}
    except ValueError as e:
      raise ValueError(f"attention variant '{self.name}': {e}") from None


def _details(variant: AttentionVariant) -> str:
  kernel = f"; a kernel for {', '.join(sorted(variant.platforms))}" if variant.auto_priority is not None else ""
  maps = "" if variant.weights else " (no attention weights)"
  captures = f"; captures {', '.join(sorted(variant.captures))}" if variant.captures else ""
  return f"supports: {', '.join(sorted(variant.supports))}{maps}{kernel}{captures}"


def _declare(name: str, fn: Callable, *, supports, params: Mapping[str, Param] | None = None,
             weights: Callable | None = None, reference: Callable | None = None,
             example_options: Mapping[str, Any] | None = None, doc: str = "", platforms=None,
             limits: Callable | None = None, auto_priority: int | None = None,
             decode_state: DecodeState = FULL, captures: Mapping[str, Capture] | None = None,
             reads_positions: bool = False, splits_sequence: bool = False) -> AttentionVariant:
  """The entry of a variant registered with `register` (checks its declaration against its function)."""
  unknown = set(supports) - set(FEATURES)
  if unknown:
    raise ValueError(f"unknown features {sorted(unknown)} for '{name}'; features are {FEATURES}")
  params = dict(params or {})
  if auto_priority is not None and not platforms:
    raise ValueError(f"attention variant '{name}': auto_priority= ranks a kernel among the kernels of its backend, "
                     "so it needs platforms= (e.g. platforms={'gpu'})")
  parameters = inspect.signature(fn).parameters
  takes_rest = any(p.kind == p.VAR_KEYWORD for p in parameters.values())  # `**masking` takes the signature
  lacking = [] if takes_rest else sorted(set(_declared(supports, SIGNATURE)) - set(parameters))
  if lacking:
    raise ValueError(f"attention variant '{name}' must accept the keyword arguments {lacking} (the one "
                     "signature, see jformer/attention/__init__.py)")
  captures = dict(captures or {})
  for argument, declared in (("params", params), ("captures", captures)):
    if bool(declared) != (argument in parameters):
      raise ValueError(f"attention variant '{name}': a function declaring {argument}= must take a `{argument}` "
                       "keyword argument, and only then")
  if not all(isinstance(c, Capture) for c in captures.values()):
    raise ValueError(f"attention variant '{name}': captures= maps names to jformer.attention.Capture(fn)")
  option_parameters = [p for p in parameters.values()
                       if p.kind == p.KEYWORD_ONLY and p.name not in SIGNATURE and p.name not in RESERVED]
  options = {p.name: p.default for p in option_parameters}
  types = {p.name: option_type(p) for p in option_parameters}
  declared = frozenset(supports)
  decode_state.check(name, declared, options)
  if splits_sequence and "mesh" not in parameters:
    raise ValueError(f"attention variant '{name}': splits_sequence=True runs a split sequence on the `mesh` its "
                     "function takes, so it needs a `mesh` keyword argument")
  split = _SplitSupport(splits_sequence, weights is softmax_weights and not params, bool(captures) or reads_positions)
  guard = functools.partial(_guarded, name, declared, params, captures, options, types, limits, "mesh" in parameters,
                            split)
  examples = dict(example_options or {})
  try:
    _check_options(name, options, types, examples)
  except ValueError as e:
    raise ValueError(f"{e} (in example_options= of the registration)") from None
  if weights is None and reference is None:
    raise ValueError(f"attention variant '{name}' declares neither weights= nor reference=, so nothing says what "
                     "it computes. Since jformer 0.2 weights= has no default (it was softmax attention's, which drew "
                     "softmax maps for variants that are not softmax); a variant that computes softmax attention "
                     "passes weights=jformer.attention.softmax_weights, another its own weights or a reference=")
  return AttentionVariant(
      name=name, fn=guard(fn), supports=declared | {"gqa"}, options=options, option_types=types, params=params,
      weights=None if weights is None else guard(_without_dropout(weights), repeat=False, limited=False),
      reference=guard(reference or _weighted_values(weights), repeat=False, limited=False),
      example_options=examples, doc=doc or first_line(fn.__doc__),
      platforms=None if platforms is None else frozenset(platforms), limits=limits, auto_priority=auto_priority,
      decode_state=decode_state, captures=captures, reads_positions=reads_positions,
      splits_sequence=splits_sequence)


REGISTRY: Registry[AttentionVariant] = Registry("attention variant", declare=_declare, details=_details)


def register(name: str, *, supports, params: Mapping[str, Param] | None = None, weights: Callable | None = None,
             reference: Callable | None = None, example_options: Mapping[str, Any] | None = None, doc: str = "",
             platforms=None, limits: Callable | None = None, auto_priority: int | None = None,
             decode_state: DecodeState = FULL, captures: Mapping[str, Capture] | None = None,
             reads_positions: bool = False, splits_sequence: bool = False):
  """Decorator: `@register("my_variant", supports={"causal", "segment_ids"}, weights=...)` above the function.

  The function takes the full signature, by name or as `**masking` (and `params` when it declares parameters,
  `captures` when it declares captures, `mesh` when it runs per device on a mesh: a `jformer.axes.Placement` or
  None); its extra keyword-only
  parameters are its options (from `model.attention_options`), required when they have no default; an int
  option takes a positive int, a float option a number. It only sees the features it declares: a call asking
  for another one is refused, with the feature named.

  Args:
    supports: the FEATURES it supports.
    params: {name: `jformer.registry.Param`}: learned parameters, created by MultiHeadAttention and passed as
      `params={name: array}`; shapes may name MODEL_DIMS and the variant's options.
    weights: its attention weights as a function, `[B, H, T, S]` (`softmax_weights` for a variant that computes
      softmax attention); None if it has none, and then a `reference` (it then has no attention maps).
    reference: its explicit formula; default the weights times the values.
    example_options: options that make it run at test sizes; needed when it has required options (sweeps and
      benchmarks run it with these values of them, `AttentionVariant.runnable_options`).
    platforms: the JAX backends it is built for ("cpu", "gpu", "tpu"); None (default) for any.
    limits: `limits(query, key, value, **masking) -> str | None`, the reason it cannot run a call (shapes, dtype,
      backend, a form of a declared feature it cannot take), checked before every call (`AttentionVariant`).
    auto_priority: a library kernel that `auto` may pick on its `platforms`: the highest priority that can
      express a call runs it (`jformer.attention.auto`). None: `auto` never picks it.
    decode_state: what it keeps between decode steps (`jformer.attention.decode_state`): FULL (default), or
      `window("window_size")`, or `recurrent(init, step)`.
    captures: {name: `jformer.attention.Capture`}: per-token tensors the model computes from the layer input and
      passes as `captures={"q": {name: [B, T, H]}, "kv": {name: [B, S, H]}}` (`jformer.attention.capture`).
    reads_positions: the function reads absolute positions, so the model passes them for packed rows too
      (`AttentionVariant.reads_positions`).
    splits_sequence: its function (which takes `mesh`) runs a sequence split over the mesh's `sequence` axis itself;
      default False: such calls run under `jformer.attention.context_parallel` (module doc there).
  """
  return REGISTRY.register(name, origin=caller(), supports=supports, params=params, weights=weights,
                           reference=reference, example_options=example_options, doc=doc, platforms=platforms,
                           limits=limits, auto_priority=auto_priority, decode_state=decode_state, captures=captures,
                           reads_positions=reads_positions, splits_sequence=splits_sequence)


def get(name: str) -> AttentionVariant:
  """The variant registered as `name`; an unknown name raises a KeyError listing the known ones."""
  return REGISTRY.get(name)


def available() -> list[str]:
  """Sorted names of the registered variants."""
  return REGISTRY.available()


def kernels(backend: str) -> list[AttentionVariant]:
  """The library kernels `auto` may pick on `backend`, highest `auto_priority` first."""
  found = [v for _, v in REGISTRY.items() if v.auto_priority is not None and backend in v.platforms]
  return sorted(found, key=lambda v: -v.auto_priority)


def requested_features(*, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
                       kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None,
                       logits_softcap=0.0, window=None) -> set[str]:
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
  if logits_softcap:
    used.add("softcap")
  if window is not None:
    used.add("window")
  return used


def _declared(supports, arguments: Mapping[str, Any]) -> dict[str, Any]:
  """`arguments` without those of features not in `supports` (`FEATURE_ARGUMENTS`; called only once a call asking
  for such a feature has been refused, so what is dropped is the feature's off value)."""
  return {k: v for k, v in arguments.items() if FEATURE_ARGUMENTS.get(k) in (None, *supports)}


def check_shapes(name: str, query: jax.Array, key: jax.Array, value: jax.Array | None) -> None:
  """Raises ValueError unless query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` with H % K == 0."""
  value_shape = key.shape if value is None else value.shape
  if query.ndim != 4 or key.ndim != 4 or len(value_shape) != 4:
    raise ValueError(f"attention variant '{name}' expects [batch, length, heads, head_dim] arrays; got query "
                     f"{query.shape}, key {key.shape}, value {value_shape}")
  if (query.shape[0] != key.shape[0] or query.shape[-1] != key.shape[-1] or key.shape[:3] != value_shape[:3]
      or query.shape[2] % key.shape[2]):
    raise ValueError(f"attention variant '{name}': query {query.shape}, key {key.shape} and value {value_shape} "
                     "do not match: query and key need the same batch and head_dim, key and value the same "
                     "[batch, length, heads], and the query heads must be a multiple of the key/value heads")


class _SplitSupport(NamedTuple):
  """How a variant takes a sequence split over the mesh (`context_parallel`): whether its function runs the split
  itself (`AttentionVariant.splits_sequence`), whether it is softmax attention (the ring computes only that), and
  whether it reads what a share of the row does not hold (captured tensors, absolute positions: a flex variant's)."""
  itself: bool
  softmax: bool
  reads_whole_row: bool = False


def _guarded(name: str, declared: frozenset, params: Mapping[str, Param], captures: Mapping[str, Capture],
             options: Mapping[str, Any], option_types: Mapping[str, type | None], limits: Callable | None,
             takes_mesh: bool, split: _SplitSupport, fn: Callable, *, repeat: bool = True,
             limited: bool = True) -> Callable:
  """`fn(query, key, [value,] **kwargs)` behind the checks every variant shares: shapes, segment ids given in
  pairs, the refusal of undeclared features, option types, the declared parameters and captures, the variant's
  `limits`
  (`limited`; not for its weights/reference functions, plain JAX); key/value heads repeated for a variant that
  does not declare "gqa" (`repeat`; weights/reference functions always get H heads). A `mesh=` argument reaches
  `fn` only when its variant function takes one (`takes_mesh`, and not its weights/reference functions); when
  the mesh splits the call's tokens, `fn` runs under `context_parallel` unless it runs the split itself (`split`;
  a softmax variant always runs the ring there)."""

  @functools.wraps(fn)
  def call(query, key, *value, mesh=None, **kwargs):
    check_shapes(name, query, key, value[0] if value else None)
    if takes_mesh and limited:
      kwargs["mesh"] = mesh
    arguments = {k: kwargs.pop(k) for k in SIGNATURE if k in kwargs}
    if (arguments.get("q_segment_ids") is None) != (arguments.get("kv_segment_ids") is None):
      raise ValueError(f"attention variant '{name}': q_segment_ids and kv_segment_ids must be given together")
    window = arguments.get("window")
    if window is not None and not _is_window(window):
      raise ValueError(f"attention variant '{name}': window={window!r} must be (left, right), two ints >= 0: the "
                       "keys seen before and after each query (a window size w is (w - 1, w - 1))")
    refused = sorted(requested_features(**arguments) - declared)
    if refused:
      raise ValueError(f"attention variant '{name}' does not support {refused}, which this call asks for; it "
                       f"supports {sorted(declared | {'gqa'})}. Pick another variant (known: {available()}).")
    arguments = _declared(declared, arguments)
    given = kwargs.get("params")
    if params and (given is None or set(given) != set(params)):
      raise ValueError(f"attention variant '{name}' needs params={{{', '.join(sorted(params))}}} (its declared "
                       f"parameters), got {None if given is None else sorted(given)}")
    if captures:
      capture_lib.check(name, captures, kwargs.get("captures"), query, key)
    _check_options(name, options, option_types, {k: v for k, v in kwargs.items() if k not in RESERVED})
    reason = limits(query, key, value[0] if value else key, **arguments) if limits and limited else None
    if reason:
      raise ValueError(f"attention variant '{name}' cannot run this call: {reason}. Pick another variant (known: "
                       f"{available()}), or 'auto', which falls back by itself.")
    if "gqa" not in declared or not repeat:
      key, *value = (repeat_kv(x, query.shape[2]) for x in (key, *value))
    how = context_parallel.split(mesh, query, key, causal=arguments.get("causal", False)) if limited else None
    if how is not None and split.reads_whole_row:
      raise ValueError(f"attention variant '{name}' reads captured tensors or absolute positions, which a share of "
                       "a row split over the mesh's sequence axis does not hold; set parallel.sequence=1")
    if how is not None and (not split.itself or (how.ring and split.softmax)):
      return context_parallel.attend(name, how, fn, query, key, value[0], arguments, kwargs,
                                     positions="positions" in declared, softmax=split.softmax)
    return fn(query, key, *value, **arguments, **kwargs)

  return call


def _is_window(window) -> bool:
  """Whether `window` is a `window=` argument: (left, right), two ints >= 0."""
  return isinstance(window, (tuple, list)) and len(window) == 2 and all(
      isinstance(w, numbers.Integral) and not isinstance(w, bool) and w >= 0 for w in window)


def _without_dropout(weights: Callable) -> Callable:
  """A weights function called with the whole signature: dropout arguments dropped (weights are before dropout)."""

  @functools.wraps(weights)
  def call(query, key, *, dropout_rate=0.0, dropout_rng=None, **kwargs):
    del dropout_rate, dropout_rng
    return weights(query, key, **kwargs)

  return call


def _weighted_values(weights: Callable) -> Callable:
  """The reference formula out = weights(Q, K) V, `[B, T, H, Dv]`, value with as many heads as the query."""

  def reference(query, key, value, *, dropout_rate=0.0, dropout_rng=None, **kwargs):
    del dropout_rate, dropout_rng
    return jnp.einsum("bhts,bshd->bthd", weights(query, key, **kwargs), value.astype(jnp.float32)).astype(query.dtype)

  return reference


def _check_options(name: str, options: Mapping[str, Any], option_types: Mapping[str, type | None],
                   given: Mapping[str, Any], group: str = "model.attention_options") -> None:
  check_options(f"attention variant '{name}'", group, options, option_types, given)
