"""`Checkpointer`: a thin wrapper over `orbax.checkpoint.CheckpointManager` for training runs.

One checkpoint per saved step, in `<directory>/<step>/`, holds two items:
  state/  the training-state pytree (params, opt_state, step, rng, ...), written by Orbax's PyTree handler;
  data/   the grain iterator state (one JSON per process), written by grain's Orbax handler; absent when the
          step was saved without a data iterator.

Orbax writes each step into `<step>.orbax-checkpoint-tmp-<time>/` and renames it when complete, so a crash
mid-save leaves a temporary directory that is never listed as a step (and is deleted by the next writable
`Checkpointer` on that directory). Orbax also coordinates processes: every process calls every method.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from grain import checkpoint as grain_checkpoint

STATE_ITEM = "state"
DATA_ITEM = "data"
DataIterator = grain.DatasetIterator | grain.DataLoaderIterator


class Checkpointer:
  """Saves and restores `(training state, data iterator)` checkpoints of one run.

  Usage:

      with Checkpointer(workdir / "checkpoints", max_to_keep=5, save_interval_steps=1000) as ckpt:
        if ckpt.latest_step() is not None:
          state = ckpt.restore(state, data_iterator)
        for step in range(int(state.step), num_steps):
          state = train_step(state, next(data_iterator))
          ckpt.save(step + 1, state, data_iterator)
        if ckpt.latest_step() != num_steps:
          ckpt.save(num_steps, state, data_iterator, force=True)

  Not thread-safe (like the Orbax manager under it). Each `Checkpointer` reads the list of steps on disk when
  it is created; a read-only one used while another job trains sees only the steps that existed then.
  """

  def __init__(
      self,
      directory: str | os.PathLike[str],
      *,
      max_to_keep: int | None = 5,
      save_interval_steps: int = 1000,
      async_save: bool = True,
      read_only: bool = False,
  ):
    """Opens (and, unless `read_only`, creates) the checkpoint directory.

    Args:
      directory: where step directories live: a local path (relative ones are made absolute) or any path
        `etils.epath` knows (e.g. `gs://...`).
      max_to_keep: keep the newest this many steps and delete older ones after each save; None keeps all.
        Parameter averaging (`average_params(last=N)`) needs `max_to_keep >= N`.
      save_interval_steps: `save` writes only steps that are multiples of this (unless `force=True`);
        Orbax also saves at any step when a preemption signal was received (multi-host TPU jobs).
      async_save: write in a background thread; `save` returns once the arrays are copied off the device.
      read_only: open an existing directory to restore or read params (evaluation, averaging) without
        ever writing, deleting or cleaning up in it; `save` then raises.
    """
    if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep < 1):
      raise ValueError(f"max_to_keep must be a positive int or None (keep all), got {max_to_keep!r}.")
    if not isinstance(save_interval_steps, int) or save_interval_steps < 1:
      raise ValueError(f"save_interval_steps must be a positive int, got {save_interval_steps!r}.")
    self._directory = absolute_path(directory)
    self._read_only = read_only
    if read_only:
      if not self._directory.is_dir():
        raise FileNotFoundError(f"Checkpoint directory {self._directory} does not exist (opened read-only).")
      options = ocp.CheckpointManagerOptions(read_only=True, create=False, save_interval_steps=0)
    else:
      policies = ocp.checkpoint_managers
      options = ocp.CheckpointManagerOptions(
          save_decision_policy=policies.AnySavePolicy([
              policies.FixedIntervalPolicy(save_interval_steps),
              policies.PreemptionCheckpointingPolicy(),
          ]),
          preservation_policy=policies.LatestN(max_to_keep),
          cleanup_tmp_directories=True,
          enable_async_checkpointing=async_save,
      )
    self._manager = ocp.CheckpointManager(self._directory, options=options, handler_registry=_handler_registry())

  @property
  def directory(self) -> epath.Path:
    """The checkpoint directory."""
    return self._directory

  def save(self, step: int, state: Any, data_iterator: DataIterator | None = None, *, force: bool = False) -> bool:
    """Saves `state` (and the iterator's position) as checkpoint `step`, if `step` is due.

    A step is due when it is a multiple of `save_interval_steps` and newer than the latest saved step.
    The iterator state is read before this returns, so the iterator may be advanced right away; with
    `async_save` the arrays are written in the background (see `wait`).

    Args:
      step: the step number naming the checkpoint (an int, or a scalar integer array such as `state.step`).
      state: a pytree of arrays (e.g. a `flax.struct.dataclass` TrainState).
      data_iterator: a grain `DatasetIterator` (e.g. `iter(map_dataset.to_iter_dataset())`) or
        `DataLoaderIterator` whose position is saved alongside.
      force: save even when `step` is not due; fails if checkpoint `step` already exists.

    Returns:
      True if a save was started, False if `step` was not due.
    """
    if self._read_only:
      raise ValueError(f"This Checkpointer on {self._directory} is read-only; open it with read_only=False to save.")
    step = _as_step(step)
    args = {STATE_ITEM: ocp.args.PyTreeSave(state)}
    if data_iterator is not None:
      _check_iterator(data_iterator)
      args[DATA_ITEM] = grain_checkpoint.CheckpointSave(data_iterator)
    return self._manager.save(step, args=ocp.args.Composite(**args), force=force)

  def latest_step(self) -> int | None:
    """The newest saved step (possibly still being written asynchronously), or None when there is none."""
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """The saved steps, ascending; the newest may still be being written asynchronously (see `wait`)."""
    return sorted(self._manager.all_steps())

  def restore(self, state_template: Any, data_iterator: DataIterator | None = None, step: int | None = None) -> Any:
    """Restores checkpoint `step` (default: the latest) into the structure of `state_template`.

    Waits for a pending asynchronous save first, so the step just saved can be restored.

    Args:
      state_template: a pytree with the saved tree's structure whose leaves say how to restore each array:
        a `jax.Array` (e.g. freshly initialised state) or a `jax.ShapeDtypeStruct` with a `sharding`
        (e.g. `jax.eval_shape(init)` with shardings added) is restored as a `jax.Array` with that
        shape, dtype and sharding; a NumPy array or scalar as that NumPy type.
      data_iterator: a grain iterator of the same pipeline as the saved one; its position is set in place.
      step: which checkpoint; default the latest.

    Returns:
      The restored state, of the template's pytree type.
    """
    step = self._existing_step(step)
    target = abstract_state(state_template)
    restore_args = ocp.checkpoint_utils.construct_restore_args(target)
    args = {STATE_ITEM: ocp.args.PyTreeRestore(item=target, restore_args=restore_args)}
    if data_iterator is not None:
      _check_iterator(data_iterator)
      if DATA_ITEM not in self._manager.metadata(step).item_handlers:
        raise ValueError(
            f"Checkpoint {step} in {self._directory} holds no data-iterator state (it was saved without "
            "`data_iterator`); restore it with data_iterator=None and position the iterator yourself."
        )
      args[DATA_ITEM] = grain_checkpoint.CheckpointRestore(data_iterator)
    try:
      return self._manager.restore(step, args=ocp.args.Composite(**args))[STATE_ITEM]
    except ValueError as e:
      if "tree structures do not match" not in str(e):
        raise
      difference = str(e).split("\n", 1)[1].split("If this mismatch", 1)[0].strip()
      raise ValueError(f"checkpoint {step} in {self._directory} does not hold the state this run trains (it was "
                       f"written by another jformer version or model): {' '.join(difference.split())}. Its "
                       "parameters still serve translate and average-checkpoints; to train, use a new workdir."
                       ) from None

  def restore_params(self, step: int | None = None) -> Any:
    """Reads only the `params` subtree of checkpoint `step` (default: the latest) as NumPy arrays.

    Needs no template: the structure, shapes and dtypes come from the checkpoint's metadata, and no other
    part of the state (e.g. the optimizer moments) is read. Each process reads the whole arrays.
    """
    step = self._existing_step(step)
    tree = self._manager.metadata(step).item_metadata[STATE_ITEM].tree
    if not isinstance(tree, Mapping) or "params" not in tree:
      keys = sorted(tree) if isinstance(tree, Mapping) else type(tree).__name__
      raise ValueError(
          f"Checkpoint {step} in {self._directory} has no top-level 'params' in its state (found: {keys}); "
          "save a state with a `params` field (e.g. a TrainState dataclass)."
      )
    params = tree["params"]
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), params)
    args = ocp.args.PyTreeRestore(item={"params": params}, restore_args={"params": restore_args}, partial_restore=True)
    return self._manager.restore(step, args=ocp.args.Composite(**{STATE_ITEM: args}))[STATE_ITEM]["params"]

  def wait(self) -> None:
    """Blocks until the running asynchronous save (if any) is on disk; re-raises its error."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for pending saves and deletions, then releases the manager's resources."""
    self._manager.close()

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None):
    self.close()

  def _existing_step(self, step: int | None) -> int:
    """`step` (default: the latest), checked to be a checkpoint in the directory, after pending saves finish."""
    self.wait()
    steps = self.all_steps()
    if not steps:
      raise FileNotFoundError(f"No complete checkpoint in {self._directory}.")
    if step is None:
      return steps[-1]
    step = _as_step(step)
    if step not in steps:
      raise FileNotFoundError(f"No checkpoint for step {step} in {self._directory}; the steps there are {steps}.")
    return step


def abstract_state(template: Any) -> Any:
  """The restore target for `template`: each `jax.Array` becomes a `jax.ShapeDtypeStruct` with its sharding.

  `ShapeDtypeStruct` leaves must carry a sharding: without one Orbax restores a NumPy array, which for a
  typed PRNG key silently drops the key type. NumPy arrays and scalars are kept (restored as NumPy).
  """

  def to_target(path: jax.tree_util.KeyPath, leaf: Any) -> Any:
    if isinstance(leaf, jax.Array):
      return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=leaf.sharding)
    if isinstance(leaf, jax.ShapeDtypeStruct) and leaf.sharding is None:
      raise ValueError(
          f"Template leaf {jax.tree_util.keystr(path)} is a jax.ShapeDtypeStruct without a sharding; give it one "
          "(jax.ShapeDtypeStruct(shape, dtype, sharding=...)) or pass concrete arrays as the template."
      )
    return leaf

  return jax.tree_util.tree_map_with_path(to_target, template)


def absolute_path(path: str | os.PathLike[str]) -> epath.Path:
  """`path` as an `epath.Path`, relative local paths made absolute (Orbax's array writer requires it)."""
  path = epath.Path(path)
  return path if path.is_absolute() else path.resolve()


def _handler_registry() -> ocp.handlers.DefaultCheckpointHandlerRegistry:
  """Which Orbax handler reads and writes each item, so a fresh process can restore without having saved."""
  registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
  state_handler = ocp.PyTreeCheckpointHandler()
  registry.add(STATE_ITEM, ocp.args.PyTreeSave, state_handler)
  registry.add(STATE_ITEM, ocp.args.PyTreeRestore, state_handler)
  data_handler = grain_checkpoint.CheckpointHandler()
  registry.add(DATA_ITEM, grain_checkpoint.CheckpointSave, data_handler)
  registry.add(DATA_ITEM, grain_checkpoint.CheckpointRestore, data_handler)
  return registry


def _as_step(step: Any) -> int:
  """`step` as a non-negative Python int; accepts ints and integer scalar arrays."""
  try:
    value = operator.index(step)
  except TypeError as e:
    raise TypeError(f"step must be an int or an integer scalar array, got {step!r}.") from e
  if value < 0:
    raise ValueError(f"step must be >= 0, got {value}.")
  return value


def _check_iterator(data_iterator: Any) -> None:
  if not isinstance(data_iterator, DataIterator):
    raise TypeError(
        f"data_iterator must be a grain DatasetIterator or DataLoaderIterator (e.g. iter(dataset.to_iter_dataset())),"
        f" got {type(data_iterator).__name__}."
    )
