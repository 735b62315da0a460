"""The two parameter layouts of a stack of identical layers, and the conversion between them.

Looped (`model.scan_layers=False`, the default): one subtree per layer, `encoder/layer_0/...`, `layer_1/...`.
Scanned (`model.scan_layers=True`): one subtree `encoder/layers/...` whose arrays hold the layers stacked on a
leading `[num_layers]` axis (`nn.scan`). The same model either way: `stack_layer_params` and
`unstack_layer_params` are pure, exact and each other's inverse, so a checkpoint of one layout serves the other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import jax
import jax.numpy as jnp

LAYER = re.compile(r"layer_(\d+)")
STACKED = "layers"


def _layer_keys(tree: Mapping) -> list[str]:
  """`layer_0 .. layer_{n-1}` when `tree` holds them (all of them, from 0), else []."""
  numbers = sorted(int(m.group(1)) for key in tree if (m := LAYER.fullmatch(str(key))))
  return [f"layer_{i}" for i in numbers] if numbers == list(range(len(numbers))) else []


def stack_layer_params(params: Mapping) -> dict:
  """Looped -> scanned: every `{layer_0: t0, ..., layer_{n-1}: t_{n-1}}` in the nested mapping `params` becomes
  `{layers: t}`, each array of `t` the layers' arrays stacked `[n, ...]`; the rest is kept as it is."""
  if not isinstance(params, Mapping):
    return params
  keys = _layer_keys(params)
  out = {key: stack_layer_params(value) for key, value in params.items() if key not in keys}
  if keys:
    if STACKED in out:
      raise ValueError(f"parameters hold both {keys[0]} and {STACKED}: they are half stacked already")
    out[STACKED] = jax.tree.map(lambda *layers: jnp.stack(layers), *(params[key] for key in keys))
  return out


def unstack_layer_params(params: Mapping) -> dict:
  """Scanned -> looped: every `{layers: t}` (arrays `[n, ...]`) in the nested mapping `params` becomes
  `{layer_0: t[0], ..., layer_{n-1}: t[n-1]}`; the rest is kept as it is."""
  if not isinstance(params, Mapping):
    return params
  out = {key: unstack_layer_params(value) for key, value in params.items() if key != STACKED}
  if STACKED in params:
    stacked = params[STACKED]
    count = jax.tree.leaves(stacked)[0].shape[0]
    out.update({f"layer_{i}": jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(count)})
  return out
