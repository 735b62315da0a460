"""`rotary`: rotary position embedding (RoPE; Su et al. 2021, RoFormer): self-attention queries and keys are
rotated by their positions, so q_m . k_n depends on m - n only."""

from __future__ import annotations

import jax

from jformer.ops import positional
from jformer.positional.registry import register


def _check(dims, options):
  del options
  if dims["head_dim"] % 2:
    raise ValueError(f"rotary positions need an even head_dim = d_model / num_heads (features rotate in pairs), "
                     f"got {dims['d_model']}/{dims['heads']} = {dims['head_dim']}; change model.d_model or "
                     "model.num_heads")


@register("rotary", acts="rotary", check=_check, example_options={"base": 1000.0})
def rotary(x_BxLxHxK: jax.Array, positions_BxL: jax.Array, *, dims, params, base: float = 10000.0) -> jax.Array:
  """RoPE (Su et al. 2021, eq. 34): rotates query and key feature pairs by pos * base^(-2i/K)."""
  del dims, params
  return positional.apply_rotary(x_BxLxHxK, positions_BxL, base=base)
