"""`rotary`: rotary position embedding (RoPE; Su et al. 2021, RoFormer): self-attention queries and keys are
rotated by their positions, so q_m . k_n depends on m - n only.

Its options: `base` (theta), and a `scaling` of the frequencies for contexts longer than the pretraining length, as
transformers' `rope_type` (`jformer.ops.positional` holds each formula):
  'none'     theta_i = base^(-2i/K);
  'linear'   theta_i / factor (position interpolation);
  'llama3'   Llama 3.1's blend: `factor`, `low_freq_factor`, `high_freq_factor`, `original_max_length`;
  'yarn'     YaRN: `factor`, `original_max_length`, `beta_fast`, `beta_slow`, `truncate`, and cos/sin scaled by
             `attention_factor` (0: 0.1 ln(factor) + 1);
  'dynamic'  NTK-aware: the base grows with each call's length n = its largest position + 1 beyond
             `original_max_length` (transformers' `max_position_embeddings`). transformers recomputes the same
             frequencies from the same positions (`dynamic_rope_update`) but keeps the longest length it has seen
             while later calls stay above that length; here each call's own positions decide. Queries and keys are
             rotated as they arrive, so a decoding cache keeps each key as rotated at its step, as transformers'
             cache does.
`original_max_length` 0 stands for `model.max_length`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.ops import positional
from jformer.positional.registry import register

SCALINGS = ("none", "linear", "dynamic", "llama3", "yarn")


def _check(dims, options):
  if dims["head_dim"] % 2:
    raise ValueError(f"rotary positions need an even head_dim (features rotate in pairs), got {dims['head_dim']}; "
                     "change model.d_model, model.num_heads or model.head_dim")
  if options["scaling"] not in SCALINGS:
    raise ValueError(f"model.positional_options.scaling='{options['scaling']}' is not one of {list(SCALINGS)}")
  if options["scaling"] != "none" and options["factor"] <= 0:
    raise ValueError(f"rotary scaling '{options['scaling']}' needs a positive model.positional_options.factor, "
                     f"got {options['factor']}")
  if options["scaling"] == "llama3" and options["high_freq_factor"] <= options["low_freq_factor"]:
    raise ValueError(f"rotary scaling 'llama3' needs high_freq_factor > low_freq_factor, got "
                     f"{options['high_freq_factor']} <= {options['low_freq_factor']} (model.positional_options)")


def frequencies(dim: int, length, *, max_length: int, base: float = 10000.0, scaling: str = "none",
                factor: float = 1.0, original_max_length: int = 0, low_freq_factor: float = 1.0,
                high_freq_factor: float = 4.0, beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True,
                attention_factor: float = 0.0) -> tuple:
  """(inverse frequencies `[dim/2]` float32, the scale of cos and sin) of the options (module doc) for a call whose
  longest position + 1 is `length` (read by 'dynamic' only; may be traced); `max_length`: model.max_length."""
  length_0 = original_max_length or max_length
  if scaling == "linear":
    return positional.linear_inv_freq(dim, base, factor=factor), 1.0
  if scaling == "llama3":
    return positional.llama3_inv_freq(dim, base, factor=factor, low_freq_factor=low_freq_factor,
                                      high_freq_factor=high_freq_factor, original_max_length=length_0), 1.0
  if scaling == "yarn":
    inv_freq = positional.yarn_inv_freq(dim, base, factor=factor, original_max_length=length_0, beta_fast=beta_fast,
                                        beta_slow=beta_slow, truncate=truncate)
    return inv_freq, attention_factor or positional.yarn_attention_factor(factor)
  if scaling == "dynamic":
    return positional.dynamic_ntk_inv_freq(dim, base, factor=factor, max_length=length_0, length=length), 1.0
  return positional.rotary_inv_freq(dim, base), 1.0


@register("rotary", acts="rotary", check=_check,
          example_options={"base": 1000.0, "scaling": "yarn", "factor": 4.0, "original_max_length": 8})
def rotary(x_BxLxHxK: jax.Array, positions_BxL: jax.Array, *, dims, params, base: float = 10000.0,
           scaling: str = "none", factor: float = 1.0, original_max_length: int = 0, low_freq_factor: float = 1.0,
           high_freq_factor: float = 4.0, beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True,
           attention_factor: float = 0.0) -> jax.Array:
  """RoPE (Su et al. 2021, eq. 34): rotates query/key feature pairs by pos * base^(-2i/K), or scaled (linear, dynamic,
  llama3, yarn)."""
  del params
  inv_freq, scale = frequencies(
      x_BxLxHxK.shape[-1], jnp.max(positions_BxL) + 1, max_length=dims["max_length"], base=base, scaling=scaling,
      factor=factor, original_max_length=original_max_length, low_freq_factor=low_freq_factor,
      high_freq_factor=high_freq_factor, beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate,
      attention_factor=attention_factor)
  return positional.apply_rotary(x_BxLxHxK, positions_BxL, inv_freq=inv_freq, scale=scale)
