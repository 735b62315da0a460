"""Whether a checkpoint's parameters fit a model, read from shapes alone, and what differs when they do not.

A model's expected parameters come from `jax.eval_shape` of its init, boxed with logical axis names
(`jformer.models.summary.param_shapes`); a checkpoint's from its metadata (nothing read). The first difference is
named with the parameter, both shapes and the config key that sets the differing axis (`axes.CONFIG_KEYS`); a
checkpoint of the other layer layout (looped `layer_0/...` vs scanned `layers/...`, `model.scan_layers`) is named
with its conversion.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import flax.linen as nn
import jax

from jformer import axes


def _flat(tree) -> dict[str, Any]:
  leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata))[0]
  return {"/".join(str(getattr(k, "key", k)) for k in path): leaf for path, leaf in leaves}


def expected(boxed_params) -> dict[str, tuple[tuple[int, ...], tuple]]:
  """`{parameter path: (shape, logical axis names)}` of a model's boxed parameter shapes."""
  specs = {}
  for path, leaf in _flat(boxed_params).items():
    names = tuple(leaf.names) if isinstance(leaf, nn.LogicallyPartitioned) else ()
    value = leaf.value if isinstance(leaf, nn.meta.AxisMetadata) else leaf
    specs[path] = (tuple(value.shape), names)
  return specs


# A looped layer's path has `layer_N/` and no `layers/` (a scanned pattern's paths are `layers/layer_j/...`).
LOOPED, SCANNED = re.compile(r"^(?!(.*/)?layers/).*(^|/)layer_\d+/"), re.compile(r"(^|/)layers/")


def _layout_difference(wanted: Mapping[str, Any], found: Mapping[str, Any]) -> str | None:
  """The one-line fix when `found` (a checkpoint's paths) holds the other layer layout than `wanted`, else None."""
  def first(paths, layout):
    return next((path for path in sorted(paths) if layout.search(path)), None)
  looped, scanned = first(found, LOOPED), first(wanted, SCANNED)
  if looped and scanned and not first(found, SCANNED):
    return (f"checkpoint has per-layer parameters ({looped}) but model.scan_layers=True expects stacked ones "
            f"({scanned}): convert with jformer.models.stack_layer_params (period=len(model.layer_pattern) with a "
            "pattern), or set model.scan_layers=False")
  scanned, looped = first(found, SCANNED), first(wanted, LOOPED)
  if looped and scanned and not first(found, LOOPED):
    return (f"checkpoint has stacked parameters ({scanned}) but model.scan_layers=False expects per-layer ones "
            f"({looped}): convert with jformer.models.unstack_layer_params, or set model.scan_layers=True")
  return None


def difference(wanted: Mapping[str, tuple], params_tree) -> str | None:
  """The first way the parameters `params_tree` (arrays or metadata with `.shape`) differ from `wanted`
  (`expected`): a parameter missing or extra, or a shape, with the config key that sets it; None if they fit."""
  found = {path: tuple(leaf.shape) for path, leaf in _flat(params_tree).items()}
  missing, extra = sorted(set(wanted) - set(found)), sorted(set(found) - set(wanted))
  if missing or extra:
    if layout := _layout_difference(wanted, found):
      return layout
    parts = ([f"the model has parameter {missing[0]} that it lacks"] if missing else []) + (
        [f"it has parameter {extra[0]} that the model lacks"] if extra else [])
    return f"{' and '.join(parts)} ({len(missing)} missing, {len(extra)} extra: another number of layers, norm, " \
           "positional encoding or attention variant?)"
  for path, (shape, names) in sorted(wanted.items()):
    if found[path] != shape:
      keys = [f"{axes.CONFIG_KEYS[name]} ({got} there, {want} here)" for name, got, want in
              zip(names, found[path], shape) if got != want and name in axes.CONFIG_KEYS]
      return (f"parameter {path} is {list(found[path])} there and {list(shape)} in this model"
              + (f": {', '.join(keys)}" if keys else ""))
  return None
