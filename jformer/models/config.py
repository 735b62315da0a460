"""The frozen model configuration: built once from `config.model`, the only thing modules read."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jformer import attention, positional, runtime

NORMS = ("post", "pre")
ACTIVATIONS = ("relu", "gelu")
REMAT = ("auto", "none", "full")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


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
class TransformerConfig:
  """Hyper-parameters of the encoder-decoder Transformer (and the decoder-only LM); see configs/ for meaning."""
  vocab_size: int
  d_model: int = 512
  num_heads: int = 8
  num_kv_heads: int = 0
  d_ff: int = 2048
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.0
  attention: str = "auto"
  attention_options: tuple = ()
  positional: str = "sinusoidal"
  positional_options: tuple = ()
  max_length: int = 512
  norm: str = "post"
  activation: str = "relu"
  remat: str = "auto"
  share_embeddings: bool = True
  tie_output_embedding: bool = True
  dtype: Any = jnp.float32

  @property
  def head_dim(self) -> int:
    return self.d_model // self.num_heads

  @property
  def kv_heads(self) -> int:
    """Key/value heads: `num_kv_heads`, or `num_heads` when it is 0 (standard multi-head attention)."""
    return self.num_kv_heads or self.num_heads

  def attention_variant(self) -> attention.AttentionVariant:
    """The registered attention variant `attention` names."""
    return attention.get(self.attention)

  @property
  def dims(self) -> dict[str, int]:
    """The model dimensions a plug-in reads by name (`jformer.registry.Param` shapes, positional encodings)."""
    return dict(d_model=self.d_model, heads=self.num_heads, kv_heads=self.kv_heads, head_dim=self.head_dim,
                max_length=self.max_length)

  def attention_param_dims(self) -> dict:
    """The sizes the variant's parameter shapes may name: the model's and the variant's options."""
    return self.attention_variant().param_dims(self.dims, dict(self.attention_options))

  @classmethod
  def from_config(cls, model_config) -> "TransformerConfig":
    """Builds and validates from the `config.model` ConfigDict; raises ValueError naming what is wrong."""
    values = dict(model_config)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
      raise ValueError(f"unknown model field(s) {unknown}; known: {sorted(known)}")
    for options in ("attention_options", "positional_options"):
      values[options] = tuple(sorted(dict(values.get(options) or {}).items()))
    values["dtype"] = resolve_dtype(values.get("dtype", "float32"))
    config = cls(**values)
    config.validate()
    return config

  def validate(self) -> None:
    """Checks combinations that would fail later or silently compute the wrong thing."""
    problems = []
    if self.d_model % self.num_heads:
      problems.append(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
    if self.num_kv_heads < 0 or (self.num_kv_heads and self.num_heads % self.num_kv_heads):
      problems.append(f"num_kv_heads={self.num_kv_heads} does not divide num_heads={self.num_heads} (each key/value "
                      "head serves num_heads/num_kv_heads query heads; 1 = multi-query, 0 = num_heads)")
    try:
      positional.get(self.positional).check(self.dims, dict(self.positional_options))
    except (KeyError, ValueError) as e:  # an unknown name, an unknown option, a combination it cannot run.
      problems.append(e.args[0])
    if self.norm not in NORMS:
      problems.append(f"norm='{self.norm}' is not one of {NORMS}")
    if self.remat not in REMAT:
      problems.append(f"remat='{self.remat}' is not one of {REMAT}")
    if self.activation not in ACTIVATIONS:
      problems.append(f"activation='{self.activation}' is not one of {ACTIVATIONS}")
    if not 0.0 <= self.dropout_rate < 1.0 or not 0.0 <= self.attention_dropout_rate < 1.0:
      problems.append("dropout rates must be in [0, 1)")
    if min(self.vocab_size, self.d_model, self.d_ff, self.max_length) <= 0 or min(
        self.num_encoder_layers, self.num_decoder_layers) < 0:
      problems.append("sizes must be positive (layers may be 0)")
    if problems:
      raise ValueError("invalid model config: " + "; ".join(problems))
    try:
      variant = attention.get(self.attention)
    except KeyError as e:
      raise ValueError(str(e.args[0])) from None
    # Feature -> the setting that needs it (None: every model does).
    needs = {"causal": None, "segment_ids": None, "positions": None, "decode": None}
    if self.attention_dropout_rate > 0:
      needs["dropout"] = f"model.attention_dropout_rate={self.attention_dropout_rate}"
    if positional.get(self.positional).acts == "bias":
      needs["bias"] = f"model.positional='{self.positional}'"
    if self.kv_heads != self.num_heads:
      needs["gqa"] = f"model.num_kv_heads={self.num_kv_heads}"
    try:
      variant.check(needs=set(needs), options=dict(self.attention_options), dims=self.dims)
    except ValueError as e:
      reason = "; ".join(f"{setting} needs '{feature}'" for feature, setting in needs.items()
                         if setting and feature not in variant.supports)
      raise ValueError(f"{e} ({reason})" if reason else str(e)) from None
