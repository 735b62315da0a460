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
      Their shapes may name MODEL_DIMS and the variant's options.
    captures: {name: Capture}: the per-token tensors it reads (`captures={"q": {name: [B, T, H]}, "kv": {name:
      [B, S, H]}}`), which MultiHeadAttention computes from the layer's input (`jformer.attention.capture`).
    weights: `weights(query, key, **masking, [params=...], **options) -> [B, H, T, S]`, the attention weights it
      applies to the values (attention maps, and the reference below): `softmax_weights` for a variant that
      computes softmax attention; None if it has none (it then needs a `reference`).
    reference: `reference(query, key, value, **signature, [params=...], **options)`, the explicit formula the
      test matrix checks `fn` against: by default the weights times the values.
    example_options: options that make it run at test sizes, needed for its required options (the tests use them
      all; sweeps and benchmarks take only the values of required options from them, `runnable_options`).
    doc: one line for `jformer list attention`.
    platforms: the JAX backends it is built for ("cpu", "gpu", "tpu"; e.g. {"gpu"}: a cuDNN or Triton kernel),
      None for any; elsewhere it may refuse (cuDNN) or run slowly (a Pallas kernel in the interpreter).
    limits: `limits(query, key, value, **masking) -> str | None`: why it cannot run a call of these shapes,
      dtypes, backend or argument values (a declared feature it takes only in some form), None if it can; the
      call is then refused naming the reason, and `auto` falls back to the next kernel.
    auto_priority: for a library kernel, its rank among its backend's kernels when `auto` chooses (highest first);
      None for a variant `auto` never picks.
    decode_state: what it keeps between decode steps (`jformer.attention.decode_state`): every key and value
      (FULL, the default), those of a window (`window("window_size")`), or a recurrent state of its own
      (`recurrent(init, step)`).
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
  declared, parameters = frozenset(supports), inspect.signature(fn).parameters
  _check_signature(name, declared, parameters, platforms, auto_priority)
  params, captures = dict(params or {}), dict(captures or {})
  _check_reserved(name, parameters, params, captures)
  option_parameters = [p for p in parameters.values()
                       if p.kind == p.KEYWORD_ONLY and p.name not in SIGNATURE and p.name not in RESERVED]
  options, types = {p.name: p.default for p in option_parameters}, {p.name: option_type(p) for p in option_parameters}
  decode_state.check(name, declared, options)
  if splits_sequence and "mesh" not in parameters:
    raise ValueError(f"attention variant '{name}': splits_sequence=True runs a split sequence on the `mesh` its "
                     "function takes, so it needs a `mesh` keyword argument")
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
  guard = functools.partial(_guarded, _Declaration(
      name, declared, params, captures, options, types, limits, "mesh" in parameters, splits_sequence,
      softmax=weights is softmax_weights and not params, reads_whole_row=bool(captures) or reads_positions))
  return AttentionVariant(
      name=name, fn=guard(fn), supports=declared | {"gqa"}, options=options, option_types=types, params=params,
      weights=None if weights is None else guard(_without_dropout(weights), repeat=False, limited=False),
      reference=guard(reference or _weighted_values(weights), repeat=False, limited=False),
      example_options=examples, doc=doc or first_line(fn.__doc__),
      platforms=None if platforms is None else frozenset(platforms), limits=limits, auto_priority=auto_priority,
      decode_state=decode_state, captures=captures, reads_positions=reads_positions,
      splits_sequence=splits_sequence)


def _check_signature(name: str, supports: frozenset, parameters: Mapping[str, inspect.Parameter], platforms,
                     auto_priority: int | None) -> None:
  """Raises ValueError for an unknown feature, an `auto_priority` without `platforms`, or a function that does not
  take the signature's arguments of the features it declares (`parameters`: its own)."""
  unknown = set(supports) - set(FEATURES)
  if unknown:
    raise ValueError(f"unknown features {sorted(unknown)} for '{name}'; features are {FEATURES}")
  if auto_priority is not None and not platforms:
    raise ValueError(f"attention variant '{name}': auto_priority= ranks a kernel among the kernels of its backend, "
                     "so it needs platforms= (e.g. platforms={'gpu'})")
  takes_rest = any(p.kind == p.VAR_KEYWORD for p in parameters.values())  # `**masking` takes the signature
  lacking = [] if takes_rest else sorted(set(_declared(supports, SIGNATURE)) - set(parameters))
  if lacking:
    raise ValueError(f"attention variant '{name}' must accept the keyword arguments {lacking} (the one "
                     "signature, see jformer/attention/__init__.py)")


def _check_reserved(name: str, parameters: Mapping[str, inspect.Parameter], params: Mapping[str, Param],
                    captures: Mapping[str, Capture]) -> None:
  """Raises ValueError unless the function takes `params`/`captures` exactly when it declares them, and the
  captures are `Capture`s."""
  for argument, declared in (("params", params), ("captures", captures)):
    if bool(declared) != (argument in parameters):
      raise ValueError(f"attention variant '{name}': a function declaring {argument}= must take a `{argument}` "
                       "keyword argument, and only then")
  if not all(isinstance(c, Capture) for c in captures.values()):
    raise ValueError(f"attention variant '{name}': captures= maps names to jformer.attention.Capture(fn)")


REGISTRY: Registry[AttentionVariant] = Registry("attention variant", declare=_declare, details=_details)


def register(name: str, *, supports, params: Mapping[str, Param] | None = None, weights: Callable | None = None,
             reference: Callable | None = None, example_options: Mapping[str, Any] | None = None, doc: str = "",
             platforms=None, limits: Callable | None = None, auto_priority: int | None = None,
             decode_state: DecodeState = FULL, captures: Mapping[str, Capture] | None = None,
             reads_positions: bool = False, splits_sequence: bool = False):
  """Decorator: `@register("my_variant", supports={"causal", "segment_ids"}, weights=...)` above the function.

  The function takes the full signature, by name or as `**masking` (and `params` when it declares parameters,
  `captures` when it declares captures, `mesh` when it runs per device on a mesh: a `jformer.axes.Placement` or
  None); its extra keyword-only parameters are its options (from `model.attention_options`), required when they
  have no default; an int option takes a positive int, a float option a number. It only sees the features it
  declares: a call asking for another one is refused, with the feature named. The arguments set the
  `AttentionVariant` attributes of the same names (documented there); `doc` defaults to its docstring's first line.
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
  used = dict(causal=causal, segment_ids=q_segment_ids is not None or kv_segment_ids is not None,
              positions=q_positions is not None or kv_positions is not None, mask=mask is not None,
              bias=bias is not None, dropout=dropout_rate > 0, softcap=logits_softcap, window=window is not None)
  return {feature for feature, asked in used.items() if asked}


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


class _Declaration(NamedTuple):
  """What every call of a variant is checked against (`_guarded`): its registration's `name`, declared features
  (`declared`; "gqa" only if it takes K < H heads itself), `params`, `captures`, `options` and their types, and
  `limits`; whether its function takes the `mesh`; and how it takes a sequence split over the mesh
  (`context_parallel`): whether its function runs the split itself (`AttentionVariant.splits_sequence`), whether
  it is softmax attention (the ring computes only that), and whether it reads what a share of the row does not
  hold (captured tensors, absolute positions: a flex variant's)."""
  name: str
  declared: frozenset
  params: Mapping[str, Param]
  captures: Mapping[str, Capture]
  options: Mapping[str, Any]
  option_types: Mapping[str, type | None]
  limits: Callable | None
  takes_mesh: bool
  splits_sequence: bool
  softmax: bool
  reads_whole_row: bool

  def checked(self, arguments: dict) -> dict:
    """A call's `arguments` of the signature, without those of undeclared features (`_declared`); raises
    ValueError for segment ids not given in pairs, a malformed window, or a feature it does not declare."""
    if (arguments.get("q_segment_ids") is None) != (arguments.get("kv_segment_ids") is None):
      raise ValueError(f"attention variant '{self.name}': q_segment_ids and kv_segment_ids must be given together")
    window = arguments.get("window")
    if window is not None and not _is_window(window):
      raise ValueError(f"attention variant '{self.name}': window={window!r} must be (left, right), two ints >= 0: "
                       "the keys seen before and after each query (a window size w is (w - 1, w - 1))")
    refused = sorted(requested_features(**arguments) - self.declared)
    if refused:
      raise ValueError(f"attention variant '{self.name}' does not support {refused}, which this call asks for; it "
                       f"supports {sorted(self.declared | {'gqa'})}. Pick another variant (known: {available()}).")
    return _declared(self.declared, arguments)

  def check_inputs(self, query, key, kwargs: dict) -> None:
    """Raises ValueError unless a call's other keyword arguments (`kwargs`) hold the declared parameters and
    captures (`[B, T, ...]` at the queries `[B, T, H, D]`, `[B, S, ...]` at the keys) and known options."""
    given = kwargs.get("params")
    if self.params and (given is None or set(given) != set(self.params)):
      raise ValueError(f"attention variant '{self.name}' needs params={{{', '.join(sorted(self.params))}}} (its "
                       f"declared parameters), got {None if given is None else sorted(given)}")
    if self.captures:
      capture_lib.check(self.name, self.captures, kwargs.get("captures"), query, key)
    _check_options(self.name, self.options, self.option_types, {k: v for k, v in kwargs.items() if k not in RESERVED})

  def split(self, mesh, query, key, arguments: dict) -> context_parallel.Split | None:
    """How a call runs under `context_parallel` when `mesh` splits its tokens; None when the mesh does not, or the
    variant's function runs the split itself (a softmax variant always runs the ring there)."""
    how = context_parallel.split(mesh, query, key, causal=arguments.get("causal", False))
    if how is not None and self.reads_whole_row:
      raise ValueError(f"attention variant '{self.name}' reads captured tensors or absolute positions, which a "
                       "share of a row split over the mesh's sequence axis does not hold; set parallel.sequence=1")
    return how if how is not None and (not self.splits_sequence or (how.ring and self.softmax)) else None


def _guarded(variant: _Declaration, fn: Callable, *, repeat: bool = True, limited: bool = True) -> Callable:
  """`fn(query, key, [value,] **kwargs)` (`[B, T, H, D]`, `[B, S, K, D]`, `[B, S, K, Dv]`) behind the checks every
  variant shares: shapes, the signature's arguments (`_Declaration.checked`), the declared parameters, captures
  and options, the variant's `limits` (`limited`; not for its weights/reference functions, plain JAX); key/value
  heads repeated to H for a variant that does not declare "gqa" (`repeat`; weights/reference functions always get
  H heads). A `mesh=` argument reaches `fn` only when its variant function takes one (and not its
  weights/reference functions); when the mesh splits the call's tokens, `fn` runs under `context_parallel` unless
  it runs the split itself (`_Declaration.split`)."""

  @functools.wraps(fn)
  def call(query, key, *value, mesh=None, **kwargs):
    check_shapes(variant.name, query, key, value[0] if value else None)
    if variant.takes_mesh and limited:
      kwargs["mesh"] = mesh
    arguments = variant.checked({k: kwargs.pop(k) for k in SIGNATURE if k in kwargs})
    variant.check_inputs(query, key, kwargs)
    reason = variant.limits(query, key, value[0] if value else key, **arguments) if variant.limits and limited else None
    if reason:
      raise ValueError(f"attention variant '{variant.name}' cannot run this call: {reason}. Pick another variant "
                       f"(known: {available()}), or 'auto', which falls back by itself.")
    if "gqa" not in variant.declared or not repeat:
      key, *value = (repeat_kv(x, query.shape[2]) for x in (key, *value))
    how = variant.split(mesh, query, key, arguments) if limited else None
    if how is not None:
      return context_parallel.attend(variant.name, how, fn, query, key, value[0], arguments, kwargs,
                                     positions="positions" in variant.declared, softmax=variant.softmax)
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
