"""Per-token tensors an attention variant reads besides queries, keys and values, which the model computes from
the attention layer's input: `register(..., captures={name: Capture(fn)})` (a flex variant's mods read them as
`q[name]` and `kv[name]`, `jformer.attention.flex`).

The variant is called with `captures={"q": {name: [B, T, H] or [B, T]}, "kv": {name: [B, S, H] or [B, S]}}`: each
value at the queries and at the keys (per query head, or shared by the heads), float. `MultiHeadAttention` computes
them from its query and key/value inputs and keeps the key side in the decode cache beside the keys
(`jformer.models.captures`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import jax
import jax.numpy as jnp

from jformer.ops.masks import segment_positions


@dataclasses.dataclass(frozen=True)
class Capture:
  """A per-token tensor computed from the attention layer's input.

  Attributes:
    fn: `fn(x [B, L, d_model], params) -> [B, L, H] or [B, L]`: the value at each token (per query head, or shared
      by the heads) from the attention's input (after the layer's norm) and the variant's declared parameters
      (`params`: {name: array}, None when it declares none). Computed in float32.
    cumulative: the variant reads the running sum over the sequence instead, c_t = sum_{s <= t} fn(x)_s from the
      start of the token's own example (the Forgetting Transformer's sum of log forget gates between key j and
      query i is c_i - c_j). The model keeps the running sum between decode steps, so cached decoding equals the
      full pass, and restarts it at each example of a packed row, so packed rows equal separate examples.
  """
  fn: Callable
  cumulative: bool = False

  def values(self, x_BxLxD: jax.Array, params, segment_ids_BxL: jax.Array | None = None) -> jax.Array:
    """`fn(x, params)` in float32 (`[B, L, H]` or `[B, L]`); when `cumulative`, summed along the sequence from the
    start of each example (`segment_ids`: the examples of packed rows; None: one per row)."""
    values = jnp.asarray(self.fn(x_BxLxD, params), jnp.float32)
    if not self.cumulative:
      return values
    total = jnp.cumsum(values, axis=1)
    if segment_ids_BxL is None:
      return total
    starts = jnp.arange(values.shape[1]) - segment_positions(segment_ids_BxL)  # [B, L]: each example's first token
    before = jnp.take_along_axis(total, jnp.maximum(starts - 1, 0).reshape(starts.shape + (1,) * (values.ndim - 2)),
                                 axis=1)
    return total - jnp.where((starts > 0).reshape(before.shape[:2] + (1,) * (values.ndim - 2)), before, 0.0)


def check(variant: str, declared: Mapping[str, Capture], captures, query: jax.Array, key: jax.Array) -> None:
  """Raises ValueError unless `captures` holds a float array for each declared capture on both sides, shaped
  `[B, T, H]`/`[B, T]` at the queries and `[B, S, H]`/`[B, S]` at the keys (H: the query heads)."""
  names = sorted(declared)
  if not isinstance(captures, Mapping) or set(captures) != {"q", "kv"} or any(
      not isinstance(captures[side], Mapping) or sorted(captures[side]) != names for side in ("q", "kv")):
    raise ValueError(f"attention variant '{variant}' needs captures={{'q': {{...}}, 'kv': {{...}}}} holding its "
                     f"declared captures {names} at the queries and at the keys")
  batch, heads = query.shape[0], query.shape[2]
  for side, length in (("q", query.shape[1]), ("kv", key.shape[1])):
    for name, x in captures[side].items():
      if x.shape not in ((batch, length), (batch, length, heads)) or not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"attention variant '{variant}': capture '{name}' at the {side} side must be float "
                         f"[{batch}, {length}] or [{batch}, {length}, {heads}], got {x.dtype}{list(x.shape)}")
