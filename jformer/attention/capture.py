"""Per-token tensors an attention variant reads besides queries, keys and values, which the model computes from
the attention layer's input: `register(..., captures={name: Capture(fn)})` (a flex variant's mods read them as
`q[name]` and `kv[name]`, `jformer.attention.flex`).

The variant is called with `captures={"q": {name: [B, T, H] or [B, T]}, "kv": {name: [B, S, H] or [B, S]}}`: each
value at the queries and at the keys (per query head, or shared by the heads), float. `MultiHeadAttention` computes
them from its query and key/value inputs and keeps the key side in the decode cache beside the keys
(`jformer.models.captures`). A capture read at the queries only (`queries_only`: a gate on each query's output,
`gated`) is at the queries alone, `[B, T, H, F]` too (a vector per head), and nothing of it is computed at the keys
or cached.
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
    queries_only: the variant reads it at the queries only (an output gate), where it may be a vector per head
      (`[B, L, H, F]`); the model neither computes it at the keys nor keeps it in the decode cache. Not for a flex
      variant, whose mods read every capture at the queries and at the keys.
  """
  fn: Callable
  cumulative: bool = False
  queries_only: bool = False

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
  """Raises ValueError unless `captures` holds a float array for each declared capture at the queries, shaped
  `[B, T, H]`/`[B, T]` (or `[B, T, H, F]` for one read at the queries only), and for each of the others at the keys,
  `[B, S, H]`/`[B, S]` (H: the query heads)."""
  sides = {"q": sorted(declared), "kv": sorted(n for n, c in declared.items() if not c.queries_only)}
  if not isinstance(captures, Mapping) or set(captures) != set(sides) or any(
      not isinstance(captures[side], Mapping) or sorted(captures[side]) != names for side, names in sides.items()):
    raise ValueError(f"attention variant '{variant}' needs captures={{'q': {{...}}, 'kv': {{...}}}} holding its "
                     f"declared captures {sides['q']} at the queries and {sides['kv']} at the keys")
  batch, heads = query.shape[0], query.shape[2]
  for side, length in (("q", query.shape[1]), ("kv", key.shape[1])):
    for name, x in captures[side].items():
      vector = declared[name].queries_only and x.ndim == 4 and x.shape[:3] == (batch, length, heads)
      shaped = vector or x.shape in ((batch, length), (batch, length, heads))
      if not shaped or not jnp.issubdtype(x.dtype, jnp.floating):
        per_head = f" or [{batch}, {length}, {heads}, F]" if declared[name].queries_only else ""
        raise ValueError(f"attention variant '{variant}': capture '{name}' at the {side} side must be float "
                         f"[{batch}, {length}] or [{batch}, {length}, {heads}]{per_head}, got {x.dtype}{list(x.shape)}")
