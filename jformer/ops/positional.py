"""Positional encodings as pure functions.

- `sinusoidal`: the paper's fixed table (Sec. 3.5).
- `apply_rotary`: rotary position embedding (RoPE, Su et al. 2021) applied to queries/keys.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def sinusoidal(length: int, dim: int, *, base: float = 10000.0) -> np.ndarray:
  """PE(pos, 2i) = sin(pos / base^(2i/d)),  PE(pos, 2i+1) = cos(pos / base^(2i/d))  (paper Sec. 3.5).

  Sin at even and cos at odd feature indices (interleaved). Computed in float64 numpy and returned as
  float32, so it is a constant under jit.

  Returns:
    `[length, dim]` float32.
  """
  if dim % 2:
    raise ValueError(f"sinusoidal positional encoding needs an even dim, got {dim}")
  position_Lx1 = np.arange(length, dtype=np.float64)[:, None]
  inv_freq_half = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
  angles_LxHalf = position_Lx1 * inv_freq_half[None, :]
  table_LxD = np.empty((length, dim), dtype=np.float64)
  table_LxD[:, 0::2] = np.sin(angles_LxHalf)
  table_LxD[:, 1::2] = np.cos(angles_LxHalf)
  return table_LxD.astype(np.float32)


def apply_rotary(x_BxLxHxD: jax.Array, positions_BxL: jax.Array, *, base: float = 10000.0) -> jax.Array:
  """Rotate feature pairs (x_i, x_{i+D/2}) by the angle pos * base^(-2i/D)  (RoPE, Su et al. eq. 34).

  Uses the half-split pairing (as GPT-NeoX/LLaMA): a fixed permutation of RoFormer's interleaved pairs,
  with the same property q_m . k_n = f(q, k, m - n), i.e. the score depends only on relative position.

  Args:
    x_BxLxHxD: queries or keys, `[B, L, H, D]` with D even.
    positions_BxL: `[B, L]` integer positions (or `[L]`).

  Returns:
    `[B, L, H, D]`, same dtype as the input.
  """
  dim = x_BxLxHxD.shape[-1]
  if dim % 2:
    raise ValueError(f"rotary embedding needs an even head_dim, got {dim}")
  positions_BxL = jnp.asarray(positions_BxL)
  if positions_BxL.ndim == 1:
    positions_BxL = positions_BxL[None, :]
  inv_freq = base ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
  angles_BxLxHalf = positions_BxL.astype(jnp.float32)[:, :, None] * inv_freq
  sin = jnp.sin(angles_BxLxHalf)[:, :, None, :]
  cos = jnp.cos(angles_BxLxHalf)[:, :, None, :]
  x1, x2 = jnp.split(x_BxLxHxD.astype(jnp.float32), 2, axis=-1)
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return rotated.astype(x_BxLxHxD.dtype)
