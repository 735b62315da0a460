"""The model section of a config, declared once: `TransformerConfig` is both its schema (each field's default,
meaning, allowed values and identity: `jformer.schema.field`) and the frozen config the modules read.

Registry names (`attention`, `positional`, `normalization`, `activation`) are resolved to their entries once per
config object (`attention_variant`, `positional_encoding`, `make_norm`, `activation_fn`); the compute dtype 'auto' is
resolved when first used, inside the model, so that reading and checking a config never starts JAX's backend (a
multi-process job must join `jax.distributed` first).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from jformer import attention, positional, registry, runtime
from jformer.attention import flex
from jformer.models import activations, norms
from jformer.models.remat import MODES as REMAT
from jformer.schema import Registered, field

NORMS = ("post", "pre")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


@functools.lru_cache(maxsize=64)
def _checked_config(cls, items: tuple, generation: int) -> TransformerConfig:
  """The checked config of these field values: one object per process (while no plug-in is registered, the
  registries' `generation`), so that validating a config and building its model resolve its names once."""
  del generation  # part of the cache key only.
  config = cls(**dict(items))
  config.validate()
  return config


def _hashable(value):
  return tuple(map(_hashable, value)) if isinstance(value, (list, tuple)) else value


def _options(options) -> tuple:
  """An option group (a dict, ConfigDict or its (option, value) pairs) as sorted, hashable (option, value) pairs."""
  return tuple(sorted((k, _hashable(v)) for k, v in dict(options or {}).items()))


# What a layer kind (`model.layer_kinds`) may set: its attention and positional encoding, with their options.
KIND_KEYS = ("attention", "attention_options", "positional", "positional_options")


def _layer_kinds(kinds) -> tuple:
  """`model.layer_kinds` as sorted, hashable (kind, ((key, value), ...)) pairs, option groups as `_options`;
  raises ValueError naming a key a kind may not set."""
  normalized = []
  for kind, values in sorted(dict(kinds or {}).items()):
    values = dict(values or {})
    unknown = sorted(set(values) - set(KIND_KEYS))
    if unknown:
      raise ValueError(f"model.layer_kinds.{kind} sets {unknown}; a layer kind sets only {list(KIND_KEYS)}")
    normalized.append((kind, tuple(sorted((key, _options(value) if key.endswith("_options") else value)
                                          for key, value in values.items()))))
  return tuple(normalized)


def resolve_dtype(dtype) -> Any:
  """`model.dtype` as a jnp dtype: 'float32', 'bfloat16', or 'auto' (`runtime.auto_dtype` of JAX's backend)."""
  if not isinstance(dtype, str):
    return dtype
  if dtype == "auto":
    dtype = runtime.auto_dtype(jax.default_backend())
  if dtype not in DTYPES:
    raise ValueError(f"model.dtype='{dtype}' is not one of {sorted(DTYPES) + ['auto']}")
  return DTYPES[dtype]


@dataclasses.dataclass(frozen=True)
class AttentionCall:
  """One attention call of a model: the variant that runs it, (query, key, value), the masking arguments of the
  variant signature (`AttentionVariant.refusal`'s arguments) and the variant's options."""
  variant: attention.AttentionVariant
  arrays: tuple
  masking: dict
  options: dict


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyper-parameters of the encoder-decoder Transformer and of the decoder-only language model (`config.model`).

  The option groups hold (option, value) pairs, sorted; `from_config` builds one from a config's model section.
  """
  architecture: str = field("transformer", "The task and its model: 'transformer' (encoder-decoder translation), "
                            "'lm' (decoder-only language model) or 'synthetic' (decoder-only, scored on a synthetic "
                            "task's answers); `jformer list task`.",
                            choices=Registered("task"), identity=True)
  vocab_size: int = field(32000, "Shared source/target vocabulary size (SentencePiece).", at_least=1, identity=True)
  d_model: int = field(512, "Width of embeddings and residual stream (paper: d_model).", at_least=1, identity=True)
  num_heads: int = field(8, "Attention heads (paper: h); d_k = d_v = d_model / num_heads.", at_least=1,
                         identity=True)
  head_dim: int = field(0, "Width of each query, key and value head; 0 = d_model / num_heads (paper: d_k = d_v). "
                        "Set, the heads may be wider or narrower than d_model / num_heads (Qwen3, Gemma).",
                        at_least=0, identity=True)
  num_kv_heads: int = field(0, "Key/value heads (grouped-query attention; 1 = multi-query); 0 = num_heads (paper).",
                            at_least=0, identity=True)
  d_ff: int = field(2048, "Inner width of the feed-forward sublayer (paper: d_ff).", at_least=1, identity=True)
  num_encoder_layers: int = field(6, "Encoder layers (paper: N).", at_least=0, identity=True)
  num_decoder_layers: int = field(6, "Decoder layers (paper: N).", at_least=0, identity=True)
  dropout_rate: float = field(0.1, "Dropout on sublayer outputs and embedding sums (paper: P_drop).", at_least=0)
  attention_dropout_rate: float = field(0.0, "Dropout on attention weights (not in the paper).", at_least=0)
  attention: str = field("auto", "Attention variant (`jformer list attention`); auto: the fastest kernel per "
                         "backend and shape.", choices=Registered("attention variant"), identity=True)
  attention_options: tuple = field((), "Keyword options of that variant (e.g. window_size).", group=True,
                                   identity=True)
  positional: str = field("sinusoidal", "Positional encoding (`jformer positional list`); paper: sinusoidal.",
                          choices=Registered("positional encoding"), identity=True)
  positional_options: tuple = field((), "Keyword options of that encoding (e.g. num_buckets).", group=True,
                                    identity=True)
  layer_kinds: tuple = field((), "Named kinds of layer for `layer_pattern`: {kind: {'attention': ..., "
                             "'attention_options': {...}, 'positional': ..., 'positional_options': {...}}}, each "
                             "key optional (unset: the model's value), e.g. {'local': {'attention': 'local', "
                             "'attention_options': {'window_size': 128}}, 'global': {'attention': 'dot_product'}}; "
                             "a kind's positional acts inside attention (rotary, a bias, none).", group=True,
                             identity=True)
  layer_pattern: tuple = field((), "Each stack's layers by kind (`layer_kinds`), the pattern repeated over the "
                               "depth: layer i is kind pattern[i % len(pattern)], e.g. ('local',) * 5 + "
                               "('global',); () = every layer the model's attention and positional.",
                               identity=True)
  max_length: int = field(512, "Longest sequence the position tables cover.", at_least=1, identity=True)
  norm: str = field("post", "'post': Norm(x + Sublayer(x)) as the paper; 'pre': x + Sublayer(Norm(x)).",
                    choices=NORMS, identity=True)
  normalization: str = field("layernorm", "The norm of every sublayer, the final norm and QK-norm: 'layernorm' "
                             "(paper) or 'rmsnorm' (`jformer list normalization`).",
                             choices=Registered("normalization"), identity=True)
  final_norm: bool = field(True, "A pre-norm stack ends with a norm of its output (a post-norm stack's last "
                           "sublayer norm ends it anyway); False drops it (pre-norm only).", identity=True)
  activation: str = field("relu", "Feed-forward: 'relu' (paper), 'gelu', 'silu', or gated 'swiglu', 'geglu' "
                          "(Shazeer 2020: act(x W_0) * (x W_1), two input projections; d_ff = 2/3 of the plain "
                          "width keeps the parameter count); `jformer list activation`.",
                          choices=Registered("activation"), identity=True)
  qk_norm: bool = field(False, "Normalize queries and keys over head_dim (learned scale) before their product "
                        "(Dehghani et al. 2023); the norm is `normalization`.", identity=True)
  attention_logit_softcap: float = field(0.0, "> 0: attention logits -> cap * tanh(logits / cap) (Gemma 2); needs a "
                                         "variant declaring 'softcap' (auto picks one); 0 = off (paper).", at_least=0,
                                         identity=True)
  final_logit_softcap: float = field(0.0, "> 0: output logits -> cap * tanh(logits / cap) (Gemma 2), in training, "
                                     "evaluation and decoding; 0 = off (paper).", at_least=0, identity=True)
  z_loss: float = field(0.0, "Weight of the z-loss, weight * log(Z)^2 per target token, Z the softmax normaliser "
                        "(PaLM: 1e-4); its value is logged as train/z_loss; 0 = off (paper).", at_least=0)
  use_bias: bool = field(True, "Biases in the attention and feed-forward projections and in the norms (paper: "
                         "True; the key projection never has one).", identity=True)
  qkv_bias: bool = field(False, "Biases on the query, key and value projections whatever use_bias says (Qwen2); "
                         "only this gives the key one (which softmax ignores unless rotary positions turn it).",
                         identity=True)
  scale_embeddings: bool = field(True, "Token embeddings times sqrt(d_model) (paper Sec. 3.4); False: as they are "
                                 "(Llama, GPT-2, Qwen2).", identity=True)
  predicts_padding: bool = field(True, "The output softmax includes the padding id 0 (jformer's vocabularies, "
                                 "whose models learn never to predict it); False masks its logit out, so that an "
                                 "imported vocabulary whose start token is also its end token (GPT-2, Qwen2: one id "
                                 "more in jformer) keeps the family's distribution exactly.", identity=True)
  final_logits_bias: bool = field(False, "A learned bias b [V] on the output logits, y E^T + b (Marian's "
                                  "final_logits_bias), in training (the fused loss too), evaluation and decoding.",
                                  identity=True)
  norm_epsilon: float = field(1e-6, "Epsilon of every norm, x / sqrt(variance + epsilon) (flax's default; Llama "
                              "1e-5 or 1e-6, GPT-2 1e-5).", identity=True)
  remat: str = field("auto", "Recompute layer activations in the backward pass: auto (>= 1024 tokens), none, full, "
                     "or a jax.checkpoint policy per layer: dots_saveable (keep matmul outputs), nothing_saveable, "
                     "offload_dots (the weight matmuls' outputs marked for pinned host memory; "
                     "jformer/models/remat.py); on CPU these save memory with scan_layers only (XLA:CPU merges a "
                     "looped layer's recomputation).",
                     choices=REMAT)
  scan_layers: bool = field(False, "Run each stack's identical layers with nn.scan over parameters stacked on a "
                            "leading [num_layers] axis (`layers/...` instead of `layer_0/...`): compile time no "
                            "longer grows with depth; convert checkpoints with jformer.models.stack_layer_params.")
  share_embeddings: bool = field(True, "One embedding matrix for source and target tokens (paper Sec. 3.4).",
                                 identity=True)
  tie_output_embedding: bool = field(True, "Pre-softmax projection = target embedding transposed (paper Sec. 3.4).",
                                     identity=True)
  dtype: Any = field("float32", "Compute dtype of matmuls and activations: 'float32', 'bfloat16' (float32 "
                     "parameters, optimizer state and accumulation) or 'auto': bfloat16 on GPU/TPU and on CPUs "
                     "with AVX512_BF16/AMX, else float32.", choices=(*DTYPES, "auto"))

  @functools.cached_property
  def compute_dtype(self) -> Any:
    """`dtype` as a jnp dtype ('auto' resolved on JAX's backend when first asked, inside the model)."""
    return resolve_dtype(self.dtype)

  @functools.cached_property
  def attention_variant(self) -> attention.AttentionVariant:
    """The registered attention variant `attention` names (looked up once)."""
    return attention.get(self.attention)

  @functools.cached_property
  def positional_encoding(self) -> positional.PositionalEncoding:
    """The registered positional encoding `positional` names (looked up once)."""
    return positional.get(self.positional)

  @functools.cached_property
  def make_norm(self):
    """`make(*, use_bias, name) -> nn.Module`, the registered norm `normalization` names (looked up once)."""
    return norms.get(self.normalization)

  @functools.cached_property
  def activation_fn(self) -> activations.Activation:
    """The registered feed-forward activation `activation` names (looked up once)."""
    return activations.get(self.activation)

  @property
  def resolved_head_dim(self) -> int:
    """Each head's width: `head_dim`, or d_model / num_heads when it is 0."""
    return self.head_dim or self.d_model // self.num_heads

  @property
  def kv_heads(self) -> int:
    """Key/value heads: `num_kv_heads`, or `num_heads` when it is 0 (standard multi-head attention)."""
    return self.num_kv_heads or self.num_heads

  @property
  def dims(self) -> dict[str, int]:
    """The model dimensions a plug-in reads by name (`jformer.registry.Param` shapes, positional encodings)."""
    return dict(d_model=self.d_model, heads=self.num_heads, kv_heads=self.kv_heads, head_dim=self.resolved_head_dim,
                max_length=self.max_length)

  @functools.cached_property
  def attention_param_dims(self) -> dict:
    """The sizes the variant's parameter shapes may name: the model's and the variant's options."""
    return self.attention_variant.param_dims(self.dims, dict(self.attention_options))

  @classmethod
  def from_config(cls, model_config) -> TransformerConfig:
    """Builds and checks one from a config's `model` section (a ConfigDict or dict); raises ValueError naming
    what is wrong."""
    values = dict(model_config)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"unknown model field(s) {unknown}; known: {sorted(known)}")
    for options in ("attention_options", "positional_options"):
      values[options] = _options(values.get(options))
    values["layer_kinds"] = _layer_kinds(values.get("layer_kinds"))
    values["layer_pattern"] = tuple(values.get("layer_pattern") or ())
    return _checked_config(cls, tuple(sorted(values.items())), registry.generation())

  @functools.cached_property
  def kind_configs(self) -> dict[str, TransformerConfig]:
    """{kind: the config of a layer of that kind}: this one with the kind's attention and positional values (and
    no pattern of its own)."""
    return {kind: dataclasses.replace(self, layer_kinds=(), layer_pattern=(), **dict(values))
            for kind, values in self.layer_kinds}

  def layer_config(self, index: int) -> TransformerConfig:
    """The config of layer `index` of a stack (each stack counts from 0): its kind's, or this one without a
    pattern."""
    if not self.layer_pattern:
      return self
    return self.kind_configs[self.layer_pattern[index % len(self.layer_pattern)]]

  def layer_configs(self) -> list[TransformerConfig]:
    """The distinct configs of the layers (one per kind of the pattern, in order; [self] without a pattern)."""
    return [self.kind_configs[kind] for kind in dict.fromkeys(self.layer_pattern)] or [self]

  def any_layer_acts(self, acts: str) -> bool:
    """Whether the positional encoding of some layer acts so ('bias', 'rotary', ...)."""
    return any(layer.positional_encoding.acts == acts for layer in self.layer_configs())

  def needs(self, *, decoding: bool = False) -> dict[str, str]:
    """The attention features this model asks its variant for, each with the reason: what training asks (padding
    and packing as segment ids; causal self-attention in a decoder; a bias encoding; attention dropout; grouped
    key/value heads; a logit soft-cap), and with `decoding` what decoding adds (decode steps against a cache, masked
    by position)."""
    needs = {"segment_ids": "padding and packed rows"}
    if self.num_decoder_layers:
      needs["causal"] = "the decoder's self-attention"
    if self.attention_dropout_rate > 0:
      needs["dropout"] = f"model.attention_dropout_rate={self.attention_dropout_rate}"
    if self.positional_encoding.acts == "bias":
      needs["bias"] = f"model.positional='{self.positional}'"
    if self.kv_heads != self.num_heads:
      needs["gqa"] = f"model.num_kv_heads={self.num_kv_heads}"
    if self.attention_logit_softcap > 0:
      needs["softcap"] = f"model.attention_logit_softcap={self.attention_logit_softcap}"
    if decoding:
      needs["decode"] = needs["positions"] = "decoding (translate, generate, BLEU)"
    return needs

  def attention_refusal(self, *, decoding: bool = False) -> str | None:
    """Why the variant cannot serve this use (a feature it lacks that `needs` asks for, each named with why), None
    if it can."""
    for kind in dict.fromkeys(self.layer_pattern):  # each kind's self-attention (the model's serves cross-attention).
      reason = self.kind_configs[kind].attention_refusal(decoding=decoding)
      if reason:
        return f"layer kind '{kind}' (model.layer_kinds.{kind}): {reason}"
    variant = self.attention_variant
    missing = {feature: why for feature, why in self.needs(decoding=decoding).items()
               if feature not in variant.supports}
    if not missing:
      return None
    reasons = "; ".join(f"'{feature}' for {why}" for feature, why in sorted(missing.items()))
    return (f"attention variant '{self.attention}' does not support {reasons} (it supports "
            f"{sorted(variant.supports)}); pick another variant (`jformer list attention`)")

  def attention_calls(self, dtype, *, encoder_decoder: bool) -> list[tuple[str, str, AttentionCall]]:
    """The attention calls of a train step: `(where, the key naming the variant that serves it, the call)`, with
    abstract arrays (`jax.ShapeDtypeStruct`) in `dtype` of one row of `max_length` tokens. Each self-attention
    (the encoder's of an `encoder_decoder` model; the decoder's, causal; of each layer kind) takes one segment-id
    array for queries and keys (padding and packed rows) and a bias where its encoding acts so; the
    cross-attention of an `encoder_decoder` model takes two (the decoder's and the encoder's) and the model's
    variant. What `kernel_refusal` puts to the variants' `limits`."""
    length = self.max_length
    shape = lambda heads: jax.ShapeDtypeStruct((1, length, heads, self.resolved_head_dim), dtype)
    arrays = (shape(self.num_heads), shape(self.kv_heads), shape(self.kv_heads))
    segments = lambda: jax.ShapeDtypeStruct((1, length), jnp.int32)  # a new array per call.
    common = dict(logits_softcap=self.attention_logit_softcap, dropout_rate=self.attention_dropout_rate)
    stacks = [("encoder", False)] * bool(encoder_decoder and self.num_encoder_layers)
    stacks += [("decoder", True)] * bool(self.num_decoder_layers)
    kinds = [(f" of layer kind '{kind}'", f"model.layer_kinds.{kind}.attention", self.kind_configs[kind])
             for kind in dict.fromkeys(self.layer_pattern)] or [("", "model.attention", self)]
    calls = []
    for stack, causal in stacks:
      for of_kind, key, layer in kinds:
        ids = segments()
        bias = (jax.ShapeDtypeStruct((1, self.num_heads, length, length), jnp.float32)
                if layer.positional_encoding.acts == "bias" else None)
        calls.append((f"{stack} self-attention{of_kind}", key, AttentionCall(
            layer.attention_variant, arrays, dict(common, causal=causal, q_segment_ids=ids, kv_segment_ids=ids,
                                                  bias=bias), dict(layer.attention_options))))
    if len(stacks) == 2:
      calls.append(("cross-attention (decoder to encoder)", "model.attention", AttentionCall(
          self.attention_variant, arrays, dict(common, q_segment_ids=segments(), kv_segment_ids=segments()),
          dict(self.attention_options))))
    return calls

  def kernel_refusal(self, *, encoder_decoder: bool, backend: str | None) -> str | None:
    """Why a variant of the model cannot serve its train step on JAX backend `backend` ('cpu', 'gpu', 'tpu'; None:
    not known), found before anything runs: it is built for other backends (its declared `platforms`), or its
    `limits` refuse an attention call of the step (`attention_calls`) in the compute dtype (`model.dtype='auto'`:
    the one `backend` resolves it to; with no backend, a call is refused only in both dtypes 'auto' may pick).
    None if they can serve it; `auto` always can (it picks what runs each call)."""
    if self.dtype != "auto":
      dtypes = [self.compute_dtype]
    else:
      dtypes = [resolve_dtype(runtime.auto_dtype(backend))] if backend else [jnp.float32, jnp.bfloat16]
    per_dtype = [self.attention_calls(dtype, encoder_decoder=encoder_decoder) for dtype in dtypes]
    for _, key, call in per_dtype[0]:
      platforms = call.variant.platforms
      if backend and platforms is not None and backend not in platforms:
        return (f"attention variant '{call.variant.name}' ({key}) runs only on {' and '.join(sorted(platforms))} "
                f"(the platforms it declares), and this run's JAX backend is {backend}; set {key}='auto', which "
                "picks the kernel for each backend")
    for calls in zip(*per_dtype):
      where, key, call = calls[0]
      reasons = [call.variant.refusal(*call.arrays, **call.masking) for _, _, call in calls]
      if all(reasons):
        return (f"attention variant '{call.variant.name}' ({key}) cannot run the model's {where}: {reasons[0]}; set "
                f"{key}='auto', which falls back where a kernel cannot run a call, or another variant")
    return None

  def mod_problem(self, *, encoder_decoder: bool) -> str | None:
    """What is wrong with the functions of a flex variant the model's attention calls run (`attention_calls`), in
    the first call that shows it: `flex.mod_problem`'s one line (one small traced call of the mods per call, no
    model compiled), or None."""
    for where, _, call in self.attention_calls(jnp.float32, encoder_decoder=encoder_decoder):
      problem = flex.mod_problem(call.variant, dims=self.dims, options=call.options,
                                 causal=call.masking.get("causal", False), call=where)
      if problem:
        return problem
    return None

  def _pattern_problems(self) -> list[str]:
    """What is wrong with `layer_kinds` and `layer_pattern` together, each a sentence naming the fix."""
    kinds, pattern = dict(self.layer_kinds), self.layer_pattern
    if kinds and not pattern:
      return [f"model.layer_kinds defines {sorted(kinds)} but model.layer_pattern is empty: name the kinds in "
              "order, e.g. model.layer_pattern=('local', 'global')"]
    unknown = sorted(set(pattern) - set(kinds))
    if unknown:
      return [f"model.layer_pattern names {unknown}, which model.layer_kinds does not define (it defines "
              f"{sorted(kinds)})"]
    problems = []
    for kind, values in kinds.items():
      name = dict(values).get("positional")
      if name is None:
        continue
      try:
        acts = positional.get(name).acts
      except KeyError as e:
        problems.append(f"model.layer_kinds.{kind}: {e.args[0]}")
        continue
      if acts == "embedding":
        problems.append(f"model.layer_kinds.{kind}.positional='{name}' adds to the embeddings, once per stack, "
                        "not per layer: set it as model.positional, or give the kind one that acts inside "
                        "attention (rotary, a bias, none)")
    if self.scan_layers and pattern:
      for stack in ("num_encoder_layers", "num_decoder_layers"):
        if getattr(self, stack) % len(pattern):
          problems.append(f"scan_layers=True scans whole repeats of model.layer_pattern ({len(pattern)} layers), "
                          f"but {stack}={getattr(self, stack)} is not a multiple of {len(pattern)}; change the "
                          "depth or the pattern, or set model.scan_layers=False")
    return problems

  def check_attention(self, *, decoding: bool = False) -> None:
    """Raises ValueError with `attention_refusal`'s reason when the variant cannot serve this use."""
    reason = self.attention_refusal(decoding=decoding)
    if reason:
      raise ValueError(reason)

  def validate(self, option_groups: Mapping[str, str] | None = None) -> None:
    """Checks combinations that would fail later or silently compute the wrong thing (a config's field values
    have been checked against their declarations before, `jformer.config.validate`). `option_groups`: the config
    key of each option group a layer kind sets itself ({'attention_options':
    'model.layer_kinds.<kind>.attention_options'}), named in its errors (default: the model's)."""
    groups = {name: f"model.{name}" for name in ("attention_options", "positional_options")}
    groups.update(option_groups or {})
    problems = []
    if self.d_model % self.num_heads and not self.head_dim:
      problems.append(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}; set model.head_dim "
                      "for heads of another width")
    if self.num_kv_heads and self.num_heads % self.num_kv_heads:
      problems.append(f"num_kv_heads={self.num_kv_heads} does not divide num_heads={self.num_heads} (each key/value "
                      "head serves num_heads/num_kv_heads query heads; 1 = multi-query, 0 = num_heads)")
    for name, rate in (("dropout_rate", self.dropout_rate), ("attention_dropout_rate", self.attention_dropout_rate)):
      if not 0.0 <= rate < 1.0:
        problems.append(f"{name}={rate} is not in [0, 1)")
    if not self.final_norm and self.norm != "pre":
      problems.append("final_norm=False drops the final norm of a pre-norm stack; with norm='post' the last "
                      "sublayer's norm ends the stack (set model.norm='pre', or leave final_norm=True)")
    if not self.predicts_padding and self.final_logit_softcap > 0:
      problems.append("predicts_padding=False masks the padding logit before final_logit_softcap would cap it back "
                      "to -cap: set one of them to its default")
    if self.norm_epsilon <= 0:
      problems.append(f"norm_epsilon={self.norm_epsilon} is not positive")
    elif self.norm_epsilon != norms.EPSILON and not norms.takes_epsilon(self.normalization):
      problems.append(f"normalization '{self.normalization}' takes no epsilon (its make(...) has no `epsilon` "
                      f"keyword), so model.norm_epsilon={self.norm_epsilon} cannot reach it; leave it at "
                      f"{norms.EPSILON} or give the norm an epsilon")
    for name in ("attention_logit_softcap", "final_logit_softcap", "z_loss"):
      if getattr(self, name) < 0:
        problems.append(f"{name}={getattr(self, name)} is negative (0 = off)")
    for resolve in (lambda: self.attention_variant, lambda: self.positional_encoding, lambda: self.make_norm,
                    lambda: self.activation_fn):
      try:
        resolve()
      except KeyError as e:  # an unknown name: the known ones listed.
        problems.append(e.args[0])
    problems += self._pattern_problems()
    if not problems and self.scan_layers:
      shared = [f"model.positional='{self.positional}'"] if self.positional_encoding.acts == "bias" else []
      shared += [f"model.layer_kinds.{kind}.positional='{layer.positional}'"
                 for kind, layer in self.kind_configs.items()
                 if layer.positional_encoding.acts == "bias" and layer.positional != self.positional]
      if shared:
        problems.append(f"scan_layers=True cannot scan layers that share {' or '.join(shared)} (its bias module is "
                        "shared across layers); set model.scan_layers=False or another positional")
    if problems:
      raise ValueError("invalid model config: " + "; ".join(problems))
    for kind, values in self.layer_kinds:
      try:
        self.kind_configs[kind].validate({key: f"model.layer_kinds.{kind}.{key}" for key, _ in values
                                          if key.endswith("_options")})
      except ValueError as e:
        raise ValueError(f"invalid model config: layer kind '{kind}' (model.layer_kinds.{kind}): "
                         f"{str(e).removeprefix('invalid model config: ')}") from None
    try:
      self.positional_encoding.check(self.dims, dict(self.positional_options), group=groups["positional_options"])
      self.attention_variant.check(options=dict(self.attention_options), dims=self.dims,
                                   group=groups["attention_options"])
      self.check_attention()
    except ValueError as e:
      raise ValueError(f"invalid model config: {e}") from None
