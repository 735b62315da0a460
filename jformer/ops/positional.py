"""The math of positional encodings as pure functions (the registered encodings built on it, and how each acts
on the model: jformer/positional/).

- `sinusoidal`: the paper's fixed table (Sec. 3.5), sin and cos interleaved or in halves.
- `apply_rotary`: rotary position embedding (RoPE, Su et al. 2021) applied to queries/keys.
- `rotary_inv_freq`, `linear_inv_freq`, `llama3_inv_freq`, `yarn_inv_freq`, `yarn_attention_factor`,
  `dynamic_ntk_inv_freq`: RoPE's inverse frequencies, plain or scaled for longer contexts as transformers'
  `ROPE_INIT_FUNCTIONS` compute them (modeling_rope_utils.py: position interpolation, the Llama 3.1 report's
  'llama3', YaRN, dynamic NTK-aware scaling).
- `alibi_slopes`, `alibi_bias`: attention with linear biases (ALiBi, Press et al. 2022).
- `relative_positions`, `relative_position_buckets`: key minus query positions and T5's bucketing of them
  (Raffel et al. 2020); a learned scalar per bucket and head forms T5's relative position bias.

Position arrays are `[B, L]` ints (or `[L]`); biases are `[B or 1, H, T, S]` float32 attention-logit offsets.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


# Where the sin and cos of each frequency go: "interleaved" (the paper's: features 2i and 2i+1) or "halves"
# (tensor2tensor's, fairseq's and Marian's: feature i and d/2 + i).
SINUSOIDAL_LAYOUTS = ("interleaved", "halves")


def sinusoidal(length: int, dim: int, *, base: float = 10000.0, layout: str = "interleaved") -> np.ndarray:
  """PE(pos, 2i) = sin(pos / base^(2i/d)),  PE(pos, 2i+1) = cos(pos / base^(2i/d))  (paper Sec. 3.5).

  Sin at even and cos at odd feature indices (`layout` "interleaved"), or the same values with the sines in the
  first half and the cosines in the second, PE(pos, i) = sin(.), PE(pos, d/2 + i) = cos(.) ("halves": Marian's
  `embed_positions`). Computed in float64 numpy and returned as float32, so it is a constant under jit.

  Returns:
    `[length, dim]` float32.
  """
  if dim % 2:
    raise ValueError(f"sinusoidal positional encoding needs an even dim, got {dim}")
  if layout not in SINUSOIDAL_LAYOUTS:
    raise ValueError(f"sinusoidal layout '{layout}' is not one of {list(SINUSOIDAL_LAYOUTS)}")
  position_Lx1 = np.arange(length, dtype=np.float64)[:, None]
  inv_freq_half = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
  angles_LxHalf = position_Lx1 * inv_freq_half[None, :]
  if layout == "halves":
    return np.concatenate([np.sin(angles_LxHalf), np.cos(angles_LxHalf)], axis=1).astype(np.float32)
  table_LxD = np.empty((length, dim), dtype=np.float64)
  table_LxD[:, 0::2] = np.sin(angles_LxHalf)
  table_LxD[:, 1::2] = np.cos(angles_LxHalf)
  return table_LxD.astype(np.float32)


def apply_rotary(x_BxLxHxD: jax.Array, positions_BxL: jax.Array, *, base: float = 10000.0,
                 inv_freq: jax.Array | np.ndarray | None = None, scale: float = 1.0) -> jax.Array:
  """Rotate feature pairs (x_i, x_{i+D/2}) by the angle pos * inv_freq_i, inv_freq_i = base^(-2i/D) unless given
  (RoPE, Su et al. eq. 34), and multiply by `scale` (YaRN's attention factor, which transformers multiplies into
  cos and sin).

  Uses the half-split pairing (as GPT-NeoX/LLaMA): a fixed permutation of RoFormer's interleaved pairs,
  with the same property q_m . k_n = f(q, k, m - n), i.e. the score depends only on relative position.

  Args:
    x_BxLxHxD: queries or keys, `[B, L, H, D]` with D even.
    positions_BxL: `[B, L]` integer positions (or `[L]`).
    inv_freq: `[D/2]` inverse frequencies (a scaled rotary's: `rotary_inv_freq` and the functions below); None:
      `rotary_inv_freq(D, base)`.

  Returns:
    `[B, L, H, D]`, same dtype as the input.
  """
  dim = x_BxLxHxD.shape[-1]
  if dim % 2:
    raise ValueError(f"rotary embedding needs an even head_dim, got {dim}")
  positions_BxL = jnp.asarray(positions_BxL)
  if positions_BxL.ndim == 1:
    positions_BxL = positions_BxL[None, :]
  inv_freq = rotary_inv_freq(dim, base) if inv_freq is None else jnp.asarray(inv_freq, jnp.float32)
  angles_BxLxHalf = positions_BxL.astype(jnp.float32)[:, :, None] * inv_freq
  sin = jnp.sin(angles_BxLxHalf)[:, :, None, :] * scale
  cos = jnp.cos(angles_BxLxHalf)[:, :, None, :] * scale
  x1, x2 = jnp.split(x_BxLxHxD.astype(jnp.float32), 2, axis=-1)
  rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return rotated.astype(x_BxLxHxD.dtype)


def rotary_inv_freq(dim: int, base: float | jax.Array) -> jax.Array:
  """RoPE's inverse frequencies theta_i = base^(-2i/dim), i < dim/2 (Su et al. eq. 15; transformers'
  `_compute_default_rope_parameters`): `[dim/2]` float32 (`base` may be traced: a learned or dynamic base)."""
  return base ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)


def _default_inv_freq(dim: int, base: float) -> np.ndarray:
  """theta_i = base^(-2i/dim) `[dim/2]` in float64 numpy: the scalings below are constants under jit."""
  return float(base) ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)


def linear_inv_freq(dim: int, base: float, *, factor: float) -> np.ndarray:
  """Position interpolation (Chen et al. 2023; transformers' `_compute_linear_scaling_rope_parameters`):
  theta_i / factor, i.e. positions divided by `factor`. Returns `[dim/2]` float32."""
  return (_default_inv_freq(dim, base) / factor).astype(np.float32)


def llama3_inv_freq(dim: int, base: float, *, factor: float, low_freq_factor: float, high_freq_factor: float,
                    original_max_length: int) -> np.ndarray:
  """Llama 3.1's frequency scaling (the Llama 3 report, Sec. 3.4; transformers' `_compute_llama3_parameters`).

  With wavelength w_i = 2 pi / theta_i and L the pretraining length (`original_max_length`): w_i < L /
  high_freq_factor keeps theta_i; w_i > L / low_freq_factor divides it by `factor`; between, it is blended,
  (1 - s) theta_i / factor + s theta_i with s = (L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor).
  Returns `[dim/2]` float32.
  """
  inv_freq = _default_inv_freq(dim, base)
  wavelength = 2 * np.pi / inv_freq
  smooth = (original_max_length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
  blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
  scaled = np.where(wavelength > original_max_length / low_freq_factor, inv_freq / factor, blended)
  return np.where(wavelength < original_max_length / high_freq_factor, inv_freq, scaled).astype(np.float32)


def yarn_inv_freq(dim: int, base: float, *, factor: float, original_max_length: int, beta_fast: float = 32.0,
                  beta_slow: float = 1.0, truncate: bool = True) -> np.ndarray:
  """YaRN's "NTK-by-parts" frequencies (Peng et al. 2023, Sec. 3.2; transformers' `_compute_yarn_parameters`).

  The dimension d(r) = dim ln(L / (2 pi r)) / (2 ln base) at which a frequency makes r rotations over the
  pretraining length L (`original_max_length`) bounds a ramp: from low = d(beta_fast) to high = d(beta_slow)
  (floored and ceiled when `truncate`, clipped to [0, dim - 1]), ramp_i = clip((i - low) / (high - low), 0, 1);
  theta'_i = theta_i / factor * ramp_i + theta_i * (1 - ramp_i): fast dimensions keep their frequency, slow ones
  are interpolated. Returns `[dim/2]` float32.
  """
  def correction_dim(rotations):
    return dim * np.log(original_max_length / (rotations * 2 * np.pi)) / (2 * np.log(base))

  low, high = correction_dim(beta_fast), correction_dim(beta_slow)
  if truncate:
    low, high = np.floor(low), np.ceil(high)
  low, high = max(low, 0), min(high, dim - 1)
  ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / ((high + 0.001 if low == high else high) - low),
                 0, 1)
  inv_freq = _default_inv_freq(dim, base)
  return (inv_freq / factor * ramp + inv_freq * (1 - ramp)).astype(np.float32)


def yarn_attention_factor(factor: float) -> float:
  """YaRN's scale of cos and sin, sqrt(1/t) = 0.1 ln(factor) + 1 (Peng et al. 2023, eq. 22; transformers'
  `yarn_get_mscale`); 1 for factor <= 1. Both queries and keys carry it, so logits grow by its square."""
  return 1.0 if factor <= 1 else 0.1 * float(np.log(factor)) + 1.0


def dynamic_ntk_inv_freq(dim: int, base: float, *, factor: float, max_length: int,
                         length: int | jax.Array) -> jax.Array:
  """Dynamic NTK-aware scaling (bloc97 and emozilla 2023, the "NTK-aware" base change; transformers'
  `_compute_dynamic_ntk_parameters`): for a sequence of `length` tokens (at least `max_length`, the pretraining
  length), the base becomes base (factor length / max_length - (factor - 1))^(dim / (dim - 2)); up to `max_length`
  tokens nothing changes. `length` may be traced (a call's longest position + 1). Returns `[dim/2]` float32.
  """
  length = jnp.maximum(jnp.asarray(length, jnp.float32), max_length)
  scaled = base * (factor * length / max_length - (factor - 1)) ** (dim / (dim - 2))
  return rotary_inv_freq(dim, scaled)


def alibi_slopes(num_heads: int) -> np.ndarray:
  """Per-head ALiBi slopes m_h (Press et al. 2022, Sec. 3).

  For n heads, n a power of 2: the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8) (8 heads: 1/2 ... 1/256).
  Otherwise (the paper's recipe, as its code): the slopes of the closest smaller power of 2, k, followed by
  every other slope of 2k heads (the odd-numbered ones, 2^(-4/k), 2^(-12/k), ...) until there are n.

  Returns:
    `[num_heads]` float32 (a constant under jit).
  """
  if num_heads < 1:
    raise ValueError(f"alibi_slopes needs num_heads >= 1, got {num_heads}")
  closest = 2 ** int(np.floor(np.log2(num_heads)))
  slopes = 2.0 ** (-8.0 * np.arange(1, closest + 1, dtype=np.float64) / closest)
  if closest < num_heads:
    slopes = np.concatenate([slopes, alibi_slopes(2 * closest)[0::2][:num_heads - closest]])
  return slopes.astype(np.float32)


def alibi_bias(slopes_H: jax.Array | np.ndarray, q_positions: jax.Array, kv_positions: jax.Array, *,
               causal: bool) -> jax.Array:
  """ALiBi logits bias: -m_h * (i - j) for causal attention, -m_h * |i - j| for bidirectional attention.

  i and j are the positions of query and key. Causally, keys after the query (i - j < 0) are masked anyway.

  Args:
    slopes_H: `[H]` slopes (`alibi_slopes`).
    q_positions: `[B, T]` (or `[T]`) integer positions of the queries.
    kv_positions: `[B, S]` (or `[S]`) integer positions of the keys.
    causal: whether the attention is causal (decoder self-attention).

  Returns:
    `[B or 1, H, T, S]` float32.
  """
  distance_BxTxS = relative_positions(q_positions, kv_positions)  # j - i
  distance_BxTxS = -distance_BxTxS if causal else jnp.abs(distance_BxTxS)  # i - j or |i - j|
  return -jnp.asarray(slopes_H, jnp.float32)[None, :, None, None] * distance_BxTxS[:, None].astype(jnp.float32)


def relative_position_buckets(relative_position: jax.Array, *, bidirectional: bool, num_buckets: int = 32,
                              max_distance: int = 128) -> jax.Array:
  """T5's bucket of each relative position j - i (key minus query position; Raffel et al. 2020, Sec. 2.1).

  Exactly as T5 (mesh-tensorflow `_relative_position_bucket`, t5x `RelativePositionBiases`). Bidirectional:
  half of the buckets for keys before or at the query (j - i <= 0), half for keys after it. Unidirectional
  (causal): all buckets for n = max(i - j, 0). On each side (of `side` buckets), n < max_exact = side / 2
  gets its own bucket, then buckets grow logarithmically: max_exact + floor(log(n / max_exact) /
  log(max_distance / max_exact) * (side - max_exact)), and every n >= max_distance shares the last bucket.
  The buckets of n in [0, max_distance] are a constant table, computed in numpy float32 with T5's formula
  (epsilon included).

  Args:
    relative_position: int array of j - i, any shape.
    bidirectional: False for causal attention (positive j - i then all map to bucket 0).
    num_buckets: number of buckets (T5: 32).
    max_distance: distance from which all positions share one bucket (T5: 128).

  Returns:
    int32 array of the same shape, values in [0, num_buckets).
  """
  side = num_buckets // 2 if bidirectional else num_buckets  # buckets for one side (keys before / after).
  max_exact = side // 2
  if max_exact < 1 or max_distance <= max_exact:
    raise ValueError(f"relative_position_buckets needs num_buckets >= {4 if bidirectional else 2} and "
                     f"max_distance > {max_exact}; got num_buckets={num_buckets}, max_distance={max_distance}")
  n_table = np.arange(max_distance + 1)
  log_ratio = np.log(n_table.astype(np.float32) / max_exact + np.finfo(np.float32).eps) / np.log(
      max_distance / max_exact)
  large = np.minimum(max_exact + (log_ratio * (side - max_exact)).astype(np.int32), side - 1)
  table = np.where(n_table < max_exact, n_table, large).astype(np.int32)

  relative_position = jnp.asarray(relative_position)
  n = -relative_position  # i - j
  offset = 0
  if bidirectional:
    offset = jnp.where(n < 0, side, 0)
    n = jnp.abs(n)
  else:
    n = jnp.maximum(n, 0)
  return (offset + jnp.asarray(table)[jnp.minimum(n, max_distance)]).astype(jnp.int32)


def relative_positions(q_positions: jax.Array, kv_positions: jax.Array) -> jax.Array:
  """j - i (key position minus query position): `[B or 1, T, S]` int32 from `[B, T]`/`[B, S]` (or 1-D)."""
  q_BxT, kv_BxS = (jnp.asarray(p, jnp.int32) for p in (q_positions, kv_positions))
  q_BxT = q_BxT[None] if q_BxT.ndim == 1 else q_BxT
  kv_BxS = kv_BxS[None] if kv_BxS.ndim == 1 else kv_BxS
  return kv_BxS[:, None, :] - q_BxT[:, :, None]
