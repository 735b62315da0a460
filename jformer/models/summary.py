"""Parameter counts per module, computed from shapes only (nothing is allocated)."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np


def param_shapes(model, batch: int = 1, length: int = 8):
  """The parameter pytree of `model` as ShapeDtypeStructs (via `jax.eval_shape`, no memory used)."""
  tokens = jnp.ones((batch, length), jnp.int32)
  args, _ = model.call_arguments({"inputs": tokens, "targets": tokens})
  return jax.eval_shape(model.init, jax.random.PRNGKey(0), *args)["params"]


def count_by_module(params, depth: int = 2) -> dict[str, int]:
  """`{module path up to depth: parameter count}`, in tree order, plus 'total'."""
  counts = collections.OrderedDict()
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    names = [getattr(p, "key", str(p)) for p in path]
    for d in range(1, min(depth, len(names) - 1) + 1):
      key = "/".join(names[:d])
      counts[key] = counts.get(key, 0) + int(np.prod(leaf.shape))
  counts["total"] = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
  return counts


def format_summary(counts: dict[str, int]) -> str:
  """A two-column table: module path (indented by depth) and parameters."""
  width = max(len(k) + 2 * k.count("/") for k in counts) + 2
  lines = [f"{'module':<{width}}{'parameters':>14}"]
  for key, n in counts.items():
    name = "  " * key.count("/") + key.rsplit("/", 1)[-1]
    lines.append(f"{name:<{width}}{n:>14,}")
  return "\n".join(lines)
