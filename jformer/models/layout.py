"""The two parameter layouts of a stack of layers, and the conversion between them.

Looped (`model.scan_layers=False`, the default): one subtree per layer, `encoder/layer_0/...`, `layer_1/...`.
Scanned (`model.scan_layers=True`): one subtree `encoder/layers/...` whose arrays hold the layers stacked on a
leading `[num_layers]` axis (`nn.scan`); with a `model.layer_pattern` of p > 1 kinds, the scan runs over the
pattern's repeats and `encoder/layers/layer_j/...` holds the layers j, j + p, j + 2p, ... stacked
`[num_layers / p, ...]`. The same model either way: `stack_layer_params` and `unstack_layer_params` are pure,
exact and each other's inverse, so a checkpoint of one layout serves the other.
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


def _stack(trees) -> dict:
  return jax.tree.map(lambda *layers: jnp.stack(layers), *trees)


def stack_layer_params(params: Mapping, period: int = 1) -> dict:
  """Looped -> scanned: every `{layer_0: t0, ..., layer_{n-1}: t_{n-1}}` in the nested mapping `params` becomes
  `{layers: t}`, each array of `t` the layers' arrays stacked `[n, ...]`; with `period` p > 1 (the length of the
  model's `layer_pattern`), `{layers: {layer_j: t_j}}`, `t_j` the layers j, j + p, ... stacked `[n / p, ...]`.
  The rest is kept as it is."""
  if not isinstance(params, Mapping):
    return params
  keys = _layer_keys(params)
  out = {key: stack_layer_params(value, period) for key, value in params.items() if key not in keys}
  if keys:
    if STACKED in out:
      raise ValueError(f"parameters hold both {keys[0]} and {STACKED}: they are half stacked already")
    if len(keys) % period:
      raise ValueError(f"{len(keys)} layers are not whole repeats of a pattern of {period} layers")
    layers = [params[key] for key in keys]
    out[STACKED] = (_stack(layers) if period == 1 else
                    {f"layer_{j}": _stack(layers[j::period]) for j in range(period)})
  return out


def unstack_layer_params(params: Mapping) -> dict:
  """Scanned -> looped: every `{layers: t}` (arrays `[n, ...]`) in the nested mapping `params` becomes
  `{layer_0: t[0], ..., layer_{n-1}: t[n-1]}`, and every `{layers: {layer_j: t_j}}` (a pattern of p layers, arrays
  `[n / p, ...]`) becomes `{layer_{k p + j}: t_j[k]}`; the rest is kept as it is."""
  if not isinstance(params, Mapping):
    return params
  out = {key: unstack_layer_params(value) for key, value in params.items() if key != STACKED}
  if STACKED in params:
    stacked = params[STACKED]
    kinds = _layer_keys(stacked)
    groups = [stacked[key] for key in kinds] if kinds else [stacked]
    repeats = jax.tree.leaves(groups[0])[0].shape[0]
    out.update({f"layer_{k * len(groups) + j}": jax.tree.map(lambda a, k=k: a[k], group)
                for j, group in enumerate(groups) for k in range(repeats)})
  return out
