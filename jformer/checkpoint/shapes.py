"""Whether a checkpoint's parameters fit a model, read from shapes alone, and what differs when they do not.

A model's expected parameters come from `jax.eval_shape` of its init, boxed with logical axis names
(`jformer.models.summary.param_shapes`); a checkpoint's from its metadata (nothing read). The first difference is
named with the parameter, both shapes and the config key that sets the differing axis (`axes.CONFIG_KEYS`).
"""

from __future__ import annotations

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


def difference(wanted: Mapping[str, tuple], params_tree) -> str | None:
  """The first way the parameters `params_tree` (arrays or metadata with `.shape`) differ from `wanted`
  (`expected`): a parameter missing or extra, or a shape, with the config key that sets it; None if they fit."""
  found = {path: tuple(leaf.shape) for path, leaf in _flat(params_tree).items()}
  missing, extra = sorted(set(wanted) - set(found)), sorted(set(found) - set(wanted))
  if missing or extra:
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
