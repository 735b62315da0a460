"""Checkpoint averaging (paper Sec. 6.1) and params-only checkpoints.

"For the base models, we used a single model obtained by averaging the last 5 checkpoints [...]. For the big
models, we averaged the last 20 checkpoints." `average_params` reads only the `params` of each checkpoint, one
checkpoint at a time, into a running sum; `save_params` writes the result where decoding loads it with
`load_params` (e.g. `<workdir>/averaged/`). `save_params` also writes a checksum manifest that `load_params` verifies
(`integrity.py`); `load_params` refuses parameters that are not finite.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from jformer import paths
from jformer.checkpoint import integrity
from jformer.checkpoint.manager import Checkpointer, abstract_state


def average_params(directory: epath.PathLike, last: int = 5, *,
                   steps: Sequence[int] | None = None) -> tuple[Any, list[int]]:
  """The elementwise mean of the `params` of the newest `last` checkpoints in `directory`, or of those at `steps`.

  Peak host memory is about two copies of the params: the running sum (float32, or float64 for float64
  params) and the checkpoint being read. The optimizer state is never read.

  Args:
    directory: a `Checkpointer` directory (it is opened read-only, so a running job may keep writing).
    last: how many of the newest checkpoints to average (paper: 5 for base, 20 for big models).
    steps: the checkpoints to average instead (each must be in `directory`); `last` is then ignored.

  Returns:
    `(params, steps)`: the mean as NumPy arrays of the saved dtypes, and the averaged steps, ascending.
  """
  if steps is None and (not isinstance(last, int) or last < 1):
    raise ValueError(f"last must be a positive int, got {last!r}.")
  with Checkpointer(directory, read_only=True) as ckpt:
    saved = ckpt.all_steps()
    if not saved:
      raise FileNotFoundError(f"No complete checkpoint in {directory}; nothing to average.")
    if steps is not None:
      missing = sorted(set(steps) - set(saved))
      if not steps or missing:
        raise ValueError(f"Asked to average steps {sorted(steps)} of {directory}, which holds {saved}"
                         + (f": {missing} missing." if missing else "."))
      steps = sorted(steps)
    elif len(saved) < last:
      raise ValueError(
          f"Asked to average the last {last} checkpoints, but {directory} has only {len(saved)} "
          f"(steps {saved}); average at most {len(saved)} (jformer average-checkpoints --last={len(saved)}), or "
          f"keep more checkpoints while training (--config.train.keep_checkpoints={last})."
      )
    else:
      steps = saved[-last:]
    first = ckpt.restore_params(steps[0])
    _check_floating(first, steps[0])
    total = jax.tree.map(lambda x: x.astype(jnp.promote_types(x.dtype, jnp.float32)), first)
    for step in steps[1:]:
      params = ckpt.restore_params(step)
      _check_same_tree(first, params, steps[0], step)
      total = jax.tree.map(lambda s, x: np.add(s, x.astype(s.dtype), out=s), total, params)
  mean = jax.tree.map(lambda s, x: (s / len(steps)).astype(x.dtype), total, first)
  return mean, steps


def save_params(path: epath.PathLike, params: Any, *, overwrite: bool = False) -> None:
  """Writes `params` (a pytree of arrays) as a params-only Orbax checkpoint at `path` (atomically).

  Args:
    path: the checkpoint directory to create, e.g. `<workdir>/averaged` (local or any `etils.epath` path).
    params: the pytree to save.
    overwrite: replace an existing checkpoint at `path`; otherwise an existing `path` is an error.
  """
  path = paths.absolute(path)
  if path.exists() and not overwrite:
    raise FileExistsError(f"{path} already exists; pass overwrite=True to replace it, or choose another path.")
  with ocp.PyTreeCheckpointer() as checkpointer:
    checkpointer.save(path, args=ocp.args.PyTreeSave(params), force=overwrite)
  if jax.process_index() == 0:
    integrity.write_manifest(path)


def load_params(path: epath.PathLike, template: Any = None) -> Any:
  """Reads a params checkpoint written by `save_params`.

  Args:
    path: the checkpoint directory.
    template: optional pytree of `jax.Array`s or sharded `jax.ShapeDtypeStruct`s (see
      `Checkpointer.restore`): the params are restored as `jax.Array`s with its structure, dtypes and
      shardings. Without it, they come back as NumPy arrays in the saved structure and dtypes.
  """
  path = paths.absolute(path)
  if not path.is_dir():
    raise FileNotFoundError(f"No params checkpoint at {path}; write one with save_params(path, params).")
  if not integrity.has_manifest(path):
    logging.warning("params checkpoint %s has no %s (written by an older jformer): loading it unverified.", path,
                    integrity.MANIFEST)
  elif problem := integrity.verify(path):
    raise integrity.CorruptCheckpointError(
        f"the params checkpoint {path} is corrupt: {problem}; write it again (jformer average-checkpoints) or load "
        "a training checkpoint (translate --checkpoint=latest).")
  with ocp.PyTreeCheckpointer() as checkpointer:
    if template is None:
      tree = checkpointer.metadata(path).item_metadata.tree
      restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
      params = checkpointer.restore(path, args=ocp.args.PyTreeRestore(restore_args=restore_args))
    else:
      target = abstract_state(template)
      restore_args = ocp.checkpoint_utils.construct_restore_args(target)
      params = checkpointer.restore(path, args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args))
  integrity.check_finite(params, f"the params checkpoint {path}")
  return params


def _check_floating(params: Any, step: int) -> None:
  """Averaging is defined for floating-point params only."""
  for path, x in jax.tree_util.tree_leaves_with_path(params):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      raise TypeError(
          f"Cannot average params leaf {jax.tree_util.keystr(path)} of checkpoint {step}: dtype {x.dtype} is not "
          "floating point; keep integer state outside `params`."
      )


def _check_same_tree(reference: Any, params: Any, reference_step: int, step: int) -> None:
  """Checkpoints to average must hold params of the same structure and shapes (NumPy would broadcast)."""
  if jax.tree.structure(reference) != jax.tree.structure(params):
    raise ValueError(
        f"Checkpoints {reference_step} and {step} hold params of different structure; average only "
        "checkpoints of one model (pass a smaller `last`)."
    )
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(reference), jax.tree.leaves(params), strict=True):
    if a.shape != b.shape:
      raise ValueError(
          f"Params leaf {jax.tree_util.keystr(path)} has shape {a.shape} in checkpoint {reference_step} but "
          f"{b.shape} in checkpoint {step}; average only checkpoints of one model (pass a smaller `last`)."
      )
