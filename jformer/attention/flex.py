"""Flex attention: a variant written as a `score_mod` and/or a `mask_mod` (PyTorch's FlexAttention, in JAX), run by
the one blockwise engine with its block mask, forward, backward and decode.

    def alibi(score, b, h, q_idx, kv_idx, *, params):       # logits - m_h |i - j|, a learned slope per head
      return score - params["slope"][h] * jnp.abs(q_idx - kv_idx)

    flex.register("learned_alibi", score_mod=alibi, params={"slope": Param(("heads",), constant(0.1))})

A mod is plain jax.numpy over int32 index arrays that broadcast against the scores: b (the batch row), h (the
query head), q_idx and kv_idx (the positions of the query and of the key: the index where the call gives none; in a
decode step the step and the cache slots). Keep it elementwise: the ranks of these arrays differ between the
engine's blocks and the dense formula.

    score_mod(score, b, h, q_idx, kv_idx, ...) -> the new logit (float)
    mask_mod(b, h, q_idx, kv_idx, ...) -> bool (True: the query sees the key)

Either may also take, keyword-only: `params` ({name: array}, the variant's learned parameters, declared with
`params=` as for any variant and created by the model: index them per head as `params["slope"][h]`); `q` and `kv`
({name: value}, its captured per-token tensors, declared with `captures=` (`jformer.attention.Capture`), at the
queries and at the keys); `causal` (the call's flag: T5's buckets are one-sided when causal); any other name is an
option of the variant (`model.attention_options`), with the function's default.

The variant computes (its `weights=`: the attention maps, and the reference the variant matrix checks the engine
against)
    softmax(score_mod(cap(q . k / sqrt(d))) + bias)  over the keys the call's masking (segment ids, causal, window,
                                                    mask) and the mask_mod leave visible,
the model's logit soft-cap and bias (a positional encoding's) around the mod as for every variant. It supports
every feature but dropout, and decodes with the full cache (`decode_state=` to choose another).

How it runs. The engine (`jformer.attention.blockwise`) evaluates the score_mod on each block it computes and the
mask_mod only on blocks its block mask leaves PARTIAL; the block mask is computed once per call (once per shape,
when the program is built, for a mask_mod of the indices alone) and both passes skip EMPTY blocks, so memory stays
linear in the length. Where a block masks a pair, the score_mod gets the indices and captured values of a visible
pair instead (`blockwise.visible_arguments`; the dense formula does the same): a formula finite wherever the key
is visible (a log of the distance back, under causal masking) trains with finite gradients, whatever it gives on
the pairs the masking hides. Gradients reach queries, keys, values, bias, parameters and captured values, summed
in a fixed order. Mods built with the constructors here carry what a library kernel takes as data: the `CAUSAL` and
`sliding_window(left, right)` masks (`and_masks` combines masks) and the `softcap(cap)` score. A variant made of
those alone is `auto`'s call (causal=, window=, logits_softcap=: splash on TPU, cuDNN on GPU, chunked or
dot_product elsewhere); a function of its own runs it on the engine (the constructors' parts as the engine's own
masking), said once in the log with the reason. Document masking is the call's segment ids (every variant's).

Checked at load (`mod_problem`, from `jformer.config.validate`, before any data is prepared): the functions of a
variant the model uses run once, traced, on tiny arrays of each of the model's attention calls (its sizes, options
and initial parameters): a score_mod must return a float logit (a bool or int, a mask written as a score_mod, would
make the logits constants), a mask_mod a bool, each a result that broadcasts to its arguments, the score_mod
finite wherever the key is visible; a function that raises (a Python list or numpy array indexed by the traced
indices, an `if` on them) or breaks one of these is refused in one line naming the variant, its file and line, and
the fix.

Positions: a variant with a function of its own reads positions (`AttentionVariant.reads_positions`), so the model
passes them for packed rows too: q_idx and kv_idx are each token's position in its own example (in encoder-decoder
attention, the query's in the target and the key's in the source; while decoding, the step and the cache slots).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import traceback
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jformer.attention import auto, blockwise
from jformer.attention.capture import Capture
from jformer.attention.decode_state import FULL, DecodeState
from jformer.attention.registry import MASKING, REGISTRY, RESERVED, SIGNATURE, AttentionVariant
from jformer.ops.attention import dot_product_weights
from jformer.ops.masks import attention_mask
from jformer.ops.softcap import soft_cap
from jformer.registry import Param, caller, first_line, init_params, place

# What every flex variant supports: everything but dropout (the engine has none).
FEATURES = frozenset({"causal", "segment_ids", "positions", "mask", "bias", "decode", "gqa", "softcap", "window"})
# Keyword-only arguments of a mod that are not options (module doc).
MOD_ARGUMENTS = ("params", "q", "kv", "causal")
# The engine's block sizes, options of every flex variant; the tests cut their short sequences into several blocks.
CHUNKS = dict(query_chunk_size=256, key_chunk_size=512)
EXAMPLE_CHUNKS = dict(query_chunk_size=4, key_chunk_size=3)


@dataclasses.dataclass(frozen=True)
class Mask:
  """A mask_mod: causal masking and a sliding window by position (what library kernels take as data), and
  functions `fn(b, h, q_idx, kv_idx, ...) -> bool`; a key is visible where all of them say so."""
  causal: bool = False
  window: tuple[int, int] | None = None
  fns: tuple[Callable, ...] = ()


@dataclasses.dataclass(frozen=True)
class Score:
  """A score_mod: the logit soft-cap cap * tanh(score / cap) (Gemma 2; a library kernel takes it as data), or a
  function `fn(score, b, h, q_idx, kv_idx, ...)`."""
  softcap: float = 0.0
  fn: Callable | None = None


CAUSAL = Mask(causal=True)


def sliding_window(left: int, right: int = 0) -> Mask:
  """position(i) - left <= position(j) <= position(i) + right (`ops.masks.window_mask`; Mistral's window of W keys
  back is (W - 1, 0) with CAUSAL)."""
  if not (isinstance(left, int) and isinstance(right, int) and left >= 0 and right >= 0):
    raise ValueError(f"flex.sliding_window needs two ints >= 0 (keys before, keys after), got ({left!r}, {right!r})")
  return Mask(window=(left, right))


def softcap(cap: float) -> Score:
  """cap * tanh(score / cap) (Gemma 2's attention logit soft-cap)."""
  if not cap > 0:
    raise ValueError(f"flex.softcap needs a cap > 0, got {cap!r}")
  return Score(softcap=float(cap))


def and_masks(*masks) -> Mask:
  """Visible where every mask says so (masks or mask functions); what kernels take stays data: causal if any is,
  the narrowest window."""
  parts = [_as_mask(m) for m in masks]
  windows = [m.window for m in parts if m.window is not None]
  window = (min(w[0] for w in windows), min(w[1] for w in windows)) if windows else None
  return Mask(any(m.causal for m in parts), window, tuple(fn for m in parts for fn in m.fns))


def register(name: str, *, score_mod: Callable | Score | None = None, mask_mod: Callable | Mask | None = None,
             params: Mapping[str, Param] | None = None, captures: Mapping[str, Capture] | None = None,
             example_options: Mapping[str, Any] | None = None, reference: Callable | None = None, doc: str = "",
             decode_state: DecodeState = FULL) -> AttentionVariant:
  """Registers the attention variant `name` made of these mods (module doc) and returns its entry.

  Args:
    score_mod: `fn(score, b, h, q_idx, kv_idx, *, ...)`, or `softcap(cap)`; None: the scores as they are.
    mask_mod: `fn(b, h, q_idx, kv_idx, *, ...)`, `CAUSAL`, `sliding_window(...)`, or `and_masks(...)` of those;
      None: the call's masking alone.
    params: {name: `jformer.registry.Param`}: learned parameters the mods (and captures) read.
    captures: {name: `jformer.attention.Capture`}: per-token tensors the model computes from the layer input.
    example_options: options that make it run at test sizes (block sizes of 4 x 3 are added).
    reference: its explicit formula for the variant matrix (default: its weights times the values), e.g. the
      implementation it re-expresses.
    doc: one line for `jformer list`; default the first line of its function's docstring.
    decode_state: what it keeps between decode steps (`jformer.attention.decode_state`), default every key.
  """
  score = score_mod if isinstance(score_mod, Score) or score_mod is None else Score(fn=score_mod)
  mask = Mask() if mask_mod is None else _as_mask(mask_mod)
  if score is None and mask == Mask():
    raise ValueError(f"flex variant '{name}' needs a score_mod or a mask_mod")
  if any(c.queries_only for c in (captures or {}).values()):
    raise ValueError(f"flex variant '{name}': its mods read each capture at the queries and at the keys, so none may "
                     "be queries_only (that is for a variant's own function: an output gate)")
  spec = _Spec(name, score, mask)
  for fn, arity in spec.functions():
    _check_positional(name, fn, arity)
  options = _options(name, spec)
  documented = next((fn.__doc__ for fn, _ in spec.functions() if fn.__doc__), None)
  REGISTRY.register(name, origin=caller(), supports=FEATURES, params=params, captures=captures, weights=_weights(spec),
                    reference=reference, example_options={**EXAMPLE_CHUNKS, **(example_options or {})},
                    doc=doc or first_line(documented) or f"flex attention: {spec.describe()}",
                    decode_state=decode_state, reads_positions=bool(spec.functions()))(
                        _variant_function(spec, options, learned=bool(params), captured=bool(captures)))
  return REGISTRY.get(name)


@dataclasses.dataclass(frozen=True)
class _Spec:
  """A flex variant's mods, as registered."""
  name: str
  score: Score | None
  mask: Mask

  def functions(self) -> list[tuple[Callable, int]]:
    """(function, number of leading positional arguments) of each mod function (score 5, mask 4)."""
    score = [(self.score.fn, 5)] if self.score is not None and self.score.fn is not None else []
    return score + [(fn, 4) for fn in self.mask.fns]

  def describe(self) -> str:
    """E.g. "score_mod alibi, mask_mod prefix": its functions ("library masks" when it has none)."""
    kinds = {5: "score_mod", 4: "mask_mod"}
    return ", ".join(f"{kinds[arity]} {_name(fn)}" for fn, arity in self.functions()) or "library masks"

  def unlowered(self, logits_softcap: float) -> str | None:
    """Why no library kernel takes the call (its functions, or two soft-caps), None if one may (`auto`)."""
    if self.functions():
      return f"its {self.describe()} (functions)"
    if self.score is not None and logits_softcap:
      return "two soft-caps (the model's and its score_mod)"
    return None


@dataclasses.dataclass(frozen=True)
class _SoftCap:
  """The `softcap(cap)` score_mod as a function, for where a kernel's one soft-cap is taken already."""
  cap: float

  def __call__(self, score, b, h, q_idx, kv_idx):
    return soft_cap(score, self.cap)


@dataclasses.dataclass(frozen=True)
class _Bound:
  """The mod functions of one call in the engine's convention (`blockwise.Mods`): each gets the keywords it takes
  (`params`, `q`, `kv`, `causal` and the options given). Hashable: the engine's static argument."""
  score_fn: Callable | None
  mask_fns: tuple[Callable, ...]
  options: tuple[tuple[str, Any], ...]
  causal: bool

  def _keywords(self, fn, params, q, kv) -> dict:
    given = dict(self.options, params=params, q=q, kv=kv, causal=self.causal)
    return {k: given[k] for k in _keyword_only(fn) if k in given}

  def score(self, score, b, h, q_idx, kv_idx, params, q, kv):
    return self.score_fn(score, b, h, q_idx, kv_idx, **self._keywords(self.score_fn, params, q, kv))

  def mask(self, b, h, q_idx, kv_idx, params, q, kv):
    return functools.reduce(jnp.logical_and, (jnp.asarray(fn(b, h, q_idx, kv_idx, **self._keywords(fn, params, q, kv)))
                                              for fn in self.mask_fns))

  def mods(self) -> blockwise.Mods:
    return blockwise.Mods(score_mod=self.score if self.score_fn is not None else None,
                          mask_mod=self.mask if self.mask_fns else None,
                          mask_reads_indices=not any({"params", "q", "kv"} & _keyword_only(fn)
                                                     for fn in self.mask_fns))


def _plan(spec: _Spec, signature: Mapping[str, Any], options: Mapping[str, Any]) -> tuple[dict, _Bound]:
  """The engine's masking arguments for a call (the call's with the mask's data merged in: causal, window, the
  soft-cap where it is the only one) and the mod functions left for the engine to evaluate."""
  masking = {k: signature.get(k, default) for k, default in SIGNATURE.items() if not k.startswith("dropout")}
  masking["causal"] = bool(masking["causal"]) or spec.mask.causal
  masking["window"] = _narrowest(masking["window"], spec.mask.window)
  score_fn = None if spec.score is None else spec.score.fn
  if spec.score is not None and score_fn is None:
    if masking["logits_softcap"]:
      score_fn = _SoftCap(spec.score.softcap)
    else:
      masking["logits_softcap"] = spec.score.softcap
  return masking, _Bound(score_fn, spec.mask.fns, tuple(sorted(options.items())), masking["causal"])


def attention(spec: _Spec, query, key, value, *, params, captures, mesh, chunks: tuple[int, int],
              options: Mapping[str, Any], **signature) -> jax.Array:
  """A flex variant's call: `auto`'s where no function of its own is left, else the blockwise engine with the
  mods (module doc)."""
  masking, bound = _plan(spec, signature, options)
  reason = spec.unlowered(signature.get("logits_softcap", 0.0))
  if reason is None:
    return auto.VARIANT.fn(query, key, value, **masking, mesh=mesh)
  auto.log_once(f"attention '{spec.name}' (flex) on {auto.backend()}, T={query.shape[1]} S={key.shape[1]}: the "
                f"blockwise engine; no library kernel takes {reason}")
  return blockwise.attention(query, key, value, **{k: masking[k] for k in MASKING}, softcap=masking["logits_softcap"],
                             query_chunk_size=min(chunks[0], query.shape[1]),
                             key_chunk_size=min(chunks[1], key.shape[1]), mods=bound.mods(), params=params,
                             captures=captures)


def _variant_function(spec: _Spec, options: Mapping[str, inspect.Parameter], *, learned: bool,
                      captured: bool) -> Callable:
  """The registered function: the one signature, `params`/`captures` when declared, the block sizes and the mods'
  options as its options."""

  def flex(query, key, value, *, params=None, captures=None, mesh=None, query_chunk_size=CHUNKS["query_chunk_size"],
           key_chunk_size=CHUNKS["key_chunk_size"], **kwargs):
    signature = {k: kwargs.pop(k) for k in list(kwargs) if k in SIGNATURE}
    return attention(spec, query, key, value, params=params, captures=captures, mesh=mesh,
                     chunks=(query_chunk_size, key_chunk_size), options=kwargs, **signature)

  keyword = lambda name, default: inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
  flex.__signature__ = inspect.Signature(
      [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ("query", "key", "value")]
      + [keyword(n, None) for n, declared in (("params", learned), ("captures", captured)) if declared]
      + [keyword("mesh", None)] + [keyword(n, d) for n, d in CHUNKS.items()] + list(options.values())
      + [inspect.Parameter("masking", inspect.Parameter.VAR_KEYWORD)])
  flex.__doc__ = f"Flex attention: {spec.describe()} (`jformer.attention.flex`)."
  flex.flex_spec = spec  # `visible_keys` reads it (the registry's wrapper keeps it)
  return flex


def is_flex(variant: AttentionVariant) -> bool:
  """Whether `variant` was registered here (made of mods)."""
  return hasattr(variant.fn, "flex_spec")


def visible_keys(variant: AttentionVariant, query, key, **kwargs) -> jax.Array | None:
  """The keys each query sees in a call of flex variant `variant` (the call's masking and the mask_mod): `[B, H or
  1, T, S]` boolean, None where nothing is masked. Arguments: the variant's (`params`, `captures`, options)."""
  if not is_flex(variant):
    raise ValueError(f"attention variant '{variant.name}' is not a flex variant (jformer.attention.flex.register)")
  return _dense(variant.fn.flex_spec, query, key, kwargs)[0]


def _dense(spec: _Spec, query, key, kwargs) -> tuple:
  """(visible keys `[B, H or 1, T, S]` or None, the score_mod on `[B, H, T, S]` logits or None, the masking
  arguments with the mask's data merged) of a call, on the whole `[T, S]` at once."""
  kwargs = dict(kwargs)
  params, captures = kwargs.pop("params", None), kwargs.pop("captures", None)
  signature = {k: kwargs.pop(k) for k in list(kwargs) if k in SIGNATURE}
  masking, bound = _plan(spec, signature, {k: v for k, v in kwargs.items() if k not in CHUNKS})
  batch, q_len, heads = query.shape[:3]
  kv_len = key.shape[1]
  positions = lambda p, length: jnp.arange(length)[None] if p is None else jnp.atleast_2d(p)
  q_idx = positions(masking["q_positions"], q_len)[:, None, :, None].astype(jnp.int32)
  kv_idx = positions(masking["kv_positions"], kv_len)[:, None, None, :].astype(jnp.int32)
  b, h = jnp.arange(batch).reshape(batch, 1, 1, 1), jnp.arange(heads).reshape(1, heads, 1, 1)
  q, kv = ({name: _dense_tokens(x, axis) for name, x in (captures or {}).get(side, {}).items()}
           for side, axis in (("q", 2), ("kv", 3)))
  visible = attention_mask(q_len, kv_len, **{k: masking[k] for k in MASKING if k != "bias"})
  if bound.mask_fns:
    mod = bound.mask(b, h, q_idx, kv_idx, params, q, kv)
    visible = mod if visible is None else visible & mod
  (b, h, q_idx, kv_idx), q, kv = blockwise.visible_arguments(visible, ((b, h, q_idx, kv_idx), q, kv))
  score_mod = None if bound.score_fn is None else (lambda s: bound.score(s, b, h, q_idx, kv_idx, params, q, kv))
  return visible, score_mod, masking


# The load-time check's call (`mod_problem`): two rows, and lengths that are neither the batch nor the heads, so that
# a mod that mixes up two axes fails there as it would at the model's sizes.
CHECK_BATCH = 2


def mod_problem(variant: AttentionVariant, *, dims: Mapping[str, int], options: Mapping[str, Any], causal: bool,
                call: str) -> str | None:
  """What is wrong with flex variant `variant`'s functions in one of the model's attention calls (`call`, e.g.
  'decoder self-attention'; `causal`: its flag), found on one small traced call of them before anything is
  prepared: a mod or capture that raises, a score_mod whose result is not a float (a mask written as a score_mod
  makes every logit a constant), a mask_mod whose result is not bool, a result that does not broadcast to the
  scores, a score_mod NaN or inf where the key is visible (initial parameters, captures of a random layer input).

  Returns the one-line message naming the variant, the function's file and line, what is wrong and the fix; None
  if nothing is, or `variant` has no functions of its own. `dims`: the model's (`MODEL_DIMS`); `options`:
  `model.attention_options`.
  """
  if not is_flex(variant) or not variant.fn.flex_spec.functions():
    return None
  spec = variant.fn.flex_spec
  q_len, kv_len = [n for n in range(3, 7) if n not in (CHECK_BATCH, dims["heads"])][:2]
  shape = (CHECK_BATCH, dims["heads"], q_len, kv_len)
  masking, bound = _plan(spec, {"causal": causal}, {k: v for k, v in options.items() if k not in CHUNKS})
  sizes = variant.param_dims(dims, options)
  mods = [(fn, "mask_mod") for fn in spec.mask.fns] + [(fn, "score_mod") for fn, arity in spec.functions()
                                                         if arity == 5]  # the masks first: the score's visible pairs

  def results(indices, score, layer_inputs):
    """(the call's own visibility `[1, 1, T, S]` or None, each mod's result), traced as the model traces them."""
    params = init_params(variant.params, sizes, jax.random.PRNGKey(0)) if variant.params else None
    q, kv = ({name: _dense_tokens(_called(f"capture '{name}'", capture.fn, lambda: capture.values(
        layer_inputs[side], params)), axis) for name, capture in variant.captures.items()}
             for side, axis in (("q", 2), ("kv", 3)))
    keywords = lambda fn: bound._keywords(fn, params, q, kv)
    return (attention_mask(q_len, kv_len, causal=masking["causal"], window=masking["window"]),
            [_called(kind, fn, lambda: jnp.asarray(fn(*(score,) * (kind == "score_mod"), *indices, **keywords(fn))))
             for fn, kind in mods])

  rng = np.random.default_rng(0)  # numpy's: no random program to compile.
  indices = tuple(np.arange(n, dtype=np.int32).reshape([n if i == axis else 1 for i in range(4)])
                  for axis, n in enumerate(shape))
  layer_inputs = {side: rng.standard_normal((CHECK_BATCH, length, dims["d_model"]), np.float32)
                  for side, length in (("q", q_len), ("kv", kv_len))}
  try:
    visible, outputs = jax.jit(results)(indices, rng.standard_normal(shape, np.float32), layer_inputs)
  except _Raised as raised:
    kind, fn, error = raised.args
    traced = isinstance(error, TypeError) or "truth value of an array" in str(error)
    fix = ("its arguments are traced int32 arrays: index jnp arrays with them (jnp.asarray([...])[h], or declare "
           "params=), not Python lists or numpy arrays, and choose with jnp.where, not `if`" if traced
           else "fix it there")
    return (f"flex variant '{variant.name}' ({_place(fn, error)}, {kind}): raised {type(error).__name__}: "
            f"{first_line(str(error)).rstrip('.')}; {fix}")
  visible = np.ones(shape, bool) if visible is None else np.broadcast_to(np.asarray(visible), shape)
  for (fn, kind), out in zip(mods, map(np.asarray, outputs)):
    what = _result_problem(kind, out, shape)
    if what is None and kind == "mask_mod":
      visible = visible & out
    elif what is None and (visible & ~np.isfinite(out)).any():
      bad = visible & ~np.isfinite(out)
      b, h, i, j = (int(x[0]) for x in np.nonzero(bad))
      what = (f"it is NaN or inf at {bad.sum()} of {visible.sum()} visible pairs of the model's {call}"
              f"{'' if masking['causal'] else ' (not causal)'}, e.g. b={b}, h={h}, q_idx={i}, kv_idx={j} (initial "
              "parameters); make the formula finite wherever the key is visible (what it gives where the masking "
              "hides the key does not matter)")
    if what is not None:
      return f"flex variant '{variant.name}' ({_place(fn)}, {kind}): {what}"
  return None


class _Raised(Exception):
  """A plug-in's function raised in `mod_problem`'s trace: args (its kind, the function, the error)."""


def _called(kind: str, fn: Callable, call: Callable):
  """`call()`, the running of plug-in function `fn`; what it raises becomes `_Raised`, naming `fn`."""
  try:
    return call()
  except Exception as e:  # whatever the plug-in's code raises: named with its file and line.
    raise _Raised(kind, fn, e) from e


def _place(fn: Callable, error: BaseException | None = None) -> str:
  """'file:line' of plug-in function `fn`: the innermost line of its file in `error`'s traceback, else its `def`."""
  try:
    path, (_, line) = inspect.getsourcefile(fn), inspect.getsourcelines(fn)
  except (OSError, TypeError):  # a builtin or a callable object: its name only.
    return _name(fn)
  frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == path] if error else []
  return place(path, frames[-1].lineno if frames else line)


def _result_problem(kind: str, out: np.ndarray, shape: tuple) -> str | None:
  """What is wrong with a mod's result `out` for arguments that broadcast to `shape` ([B, H, T, S]), and the fix;
  None if it is a float logit (score_mod) or bool (mask_mod) that broadcasts to `shape`."""
  if kind == "score_mod" and not jnp.issubdtype(out.dtype, jnp.floating):  # jnp's: bfloat16 is a float too.
    return (f"it returns {out.dtype}, not the new logit (float): the logits become its values, so attention ignores "
            "q . k; return a float formula of `score` (e.g. score - slope * distance), or register a mask (True: the "
            "query sees the key) as mask_mod=")
  if kind == "mask_mod" and out.dtype != np.bool_:
    return (f"it returns {out.dtype}, not bool (True: the query sees the key); return a comparison (e.g. kv_idx <= "
            "q_idx), or register a float term as score_mod=")
  try:
    fits = out.ndim <= len(shape) and np.broadcast_shapes(out.shape, shape) == shape
  except ValueError:
    fits = False
  if not fits:
    arguments = "score, b, h, q_idx, kv_idx" if kind == "score_mod" else "b, h, q_idx, kv_idx"
    return (f"it returns shape {tuple(out.shape)} where its arguments ({arguments}) broadcast to {shape}; keep it "
            "elementwise (no sums, reshapes or indexing along their axes): its result must broadcast to theirs")
  return None


def _weights(spec: _Spec) -> Callable:
  """The variant's `weights=`: softmax(score_mod(cap(q . k / sqrt(d))) + bias) over the visible keys, `[B, H, T,
  S]` float32, on the whole `[T, S]` at once."""

  def weights(query, key, **kwargs):
    visible, score_mod, masking = _dense(spec, query, key, kwargs)
    return dot_product_weights(query, key, mask=visible, bias=masking["bias"], softcap=masking["logits_softcap"],
                               score_mod=score_mod)

  return weights


def _dense_tokens(x: jax.Array, axis: int) -> jax.Array:
  """A captured per-token array `[B, L, H]` (or `[B, L]`) broadcastable against `[B, H, T, S]` scores: the length on
  `axis` (2: queries, 3: keys) of `[B, H or 1, ., .]`."""
  x = x[:, :, None] if x.ndim == 2 else x
  return jnp.expand_dims(jnp.swapaxes(x, 1, 2), 5 - axis)


def _as_mask(mask) -> Mask:
  return mask if isinstance(mask, Mask) else Mask(fns=(mask,))


def _narrowest(window, other):
  """The intersection of two windows (None: no window)."""
  if window is None or other is None:
    return window if other is None else other
  return (min(window[0], other[0]), min(window[1], other[1]))


def _name(fn: Callable) -> str:
  return getattr(fn, "__name__", type(fn).__name__)


@functools.lru_cache(maxsize=256)
def _keyword_only(fn: Callable) -> frozenset:
  return frozenset(p.name for p in inspect.signature(fn).parameters.values() if p.kind == p.KEYWORD_ONLY)


def _check_positional(variant: str, fn: Callable, arity: int) -> None:
  """Raises ValueError unless `fn` takes the mod's leading arguments by position and keyword-only the rest."""
  parameters = list(inspect.signature(fn).parameters.values())
  leading = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  if len(leading) != arity or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
    expected = "score, b, h, q_idx, kv_idx" if arity == 5 else "b, h, q_idx, kv_idx"
    raise ValueError(f"flex variant '{variant}': {_name(fn)} must take ({expected}, *, ...) with its other arguments "
                     f"keyword-only (params, q, kv, causal, options); got {inspect.signature(fn)}")


def _options(variant: str, spec: _Spec) -> dict[str, inspect.Parameter]:
  """{name: parameter} of the options the mod functions take (keyword-only, not MOD_ARGUMENTS)."""
  found: dict[str, inspect.Parameter] = {}
  for fn, _ in spec.functions():
    for p in inspect.signature(fn).parameters.values():
      if p.kind != p.KEYWORD_ONLY or p.name in MOD_ARGUMENTS:
        continue
      if p.name in CHUNKS or p.name in SIGNATURE or p.name in RESERVED:
        raise ValueError(f"flex variant '{variant}': {_name(fn)} names an option '{p.name}', a name the variant "
                         "signature uses; rename it")
      if p.name in found and found[p.name].default != p.default:
        raise ValueError(f"flex variant '{variant}': option '{p.name}' has two defaults, {found[p.name].default!r} "
                         f"and {p.default!r}; give it one")
      found[p.name] = p
  return found
