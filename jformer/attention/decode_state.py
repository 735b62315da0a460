"""What an attention variant keeps between decode steps: `register(..., decode_state=...)`.

A decode step feeds T new tokens (T = 1, or a prompt at once) whose keys and values join what the variant kept of
the earlier ones. Three kinds, each a declaration `MultiHeadAttention` reads (`jformer/models/layers.py`):

- `FULL` (the default): the keys and values of every position of the decode length, `[B, G, length, K]`: memory
  O(length). What any variant that masks by position can decode with.
- `window(option)`: the keys and values of the last W positions only, W the value of the variant's option named
  `option` (`local`: `window_size`), with their positions; a step attends to those W and its own T
  (`with_new_keys`) and keeps the last W of them: memory O(W) whatever the length.
- `recurrent(init, step)`: a state of fixed size that the variant updates itself: `init(batch, heads, head_dim,
  value_dim) -> state` (a dict of float32 arrays with a leading batch axis) and `step(state, query, key, value,
  [params=..., captures=...,] **options) -> (out, state)` for T new tokens (query `[B, T, H, D]`, key `[B, T, H, D]`
  with the key/value heads repeated to H, value `[B, T, H, Dv]`), causal among them and after every earlier token
  (linear attention: the sums over j of phi(k_j) v_j^T and phi(k_j); Gated DeltaNet: its state matrix): memory and
  time per token O(1) in the length. A variant that declares parameters or captures gets them as the variant
  function does: `params={name: array}`, `captures={"q": {...}, "kv": {...}}` of the T new tokens (both sides the
  same: `jformer.models.captures`); one that declares neither gets neither.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

KINDS = ("full", "window", "recurrent")
# The position of a window slot not yet written: after every query, so that causal masking hides it.
EMPTY_POSITION = 2**30


@dataclasses.dataclass(frozen=True)
class DecodeState:
  """A variant's decode state (module doc): `kind` in KINDS; `window_option` for "window"; `init` and `step` for
  "recurrent"."""
  kind: str
  window_option: str | None = None
  init: Callable | None = None
  step: Callable | None = None

  def window_size(self, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> int:
    """W of a "window" state: the variant's option `window_option` as the model sets it, else its default."""
    return int(options.get(self.window_option, defaults.get(self.window_option)))

  def check(self, variant: str, supports, options: Mapping[str, Any]) -> None:
    """Raises ValueError when the declaration cannot work for the variant: a state without "decode" support, a
    window option it does not have, a recurrent state without both functions."""
    if self.kind not in KINDS:
      raise ValueError(f"attention variant '{variant}': decode_state kind '{self.kind}' is not one of {KINDS}")
    if self.kind != "full" and "decode" not in supports:
      raise ValueError(f"attention variant '{variant}': decode_state={self.kind} needs 'decode' in supports=")
    if self.kind == "window" and self.window_option not in options:
      raise ValueError(f"attention variant '{variant}': decode_state=window('{self.window_option}') names no "
                       f"option of it (its options: {sorted(options)})")
    if self.kind == "recurrent" and (self.init is None or self.step is None):
      raise ValueError(f"attention variant '{variant}': decode_state=recurrent(init, step) needs both functions")


FULL = DecodeState("full")


def window(option: str) -> DecodeState:
  """Keep the keys and values of the last W positions, W = the variant's option `option`."""
  return DecodeState("window", window_option=option)


def recurrent(init: Callable, step: Callable) -> DecodeState:
  """Keep the variant's own fixed-size state: `init(batch, heads, head_dim, value_dim)`, `step(state, q, k, v,
  [params=..., captures=...,] **options) -> (out, state)` (module doc)."""
  return DecodeState("recurrent", init=init, step=step)


def with_new_keys(cached_BxGxWxK: jax.Array, new_BxTxGxK: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(the W cached and the T new rows, `[B, G, W + T, K]`, oldest first; the last W of them, the next cache)."""
  joined = jnp.concatenate([cached_BxGxWxK, jnp.swapaxes(new_BxTxGxK, 1, 2).astype(cached_BxGxWxK.dtype)], axis=2)
  return joined, joined[:, :, -cached_BxGxWxK.shape[2]:]
