"""`Checkpointer`: a thin wrapper over `orbax.checkpoint.CheckpointManager` for training runs.

One checkpoint per saved step, in `<directory>/<step>/`, holds two items:
  state/  the training-state pytree (params, opt_state, step, rng, ...), written by Orbax's PyTree handler;
  data/   the grain iterator state (one JSON per process), written by grain's Orbax handler; absent when the
          step was saved without a data iterator.

Orbax writes each step into `<step>.orbax-checkpoint-tmp-<time>/` and renames it when complete, so a crash
mid-save leaves a temporary directory that is never listed as a step (and is deleted by the next writable
`Checkpointer` on that directory). Orbax also coordinates processes: every process calls every method.

Once a save is on disk (seen by `wait`, `close` or the next `save`), process 0 writes `<step>/MANIFEST` (sha256 of
every file, `integrity.py`); what must not name a step before it can be restored (the run's best.json) is written
then too (`when_saved`). Restoring the latest step verifies it first: a corrupted, truncated or incomplete
step is named in one warning, moved aside to `<step>.corrupt` (so the run can save that step again) and the
newest valid step is restored; when none is valid, or a step asked for by number is corrupt, restore raises
`CorruptCheckpointError`. A step without a manifest (older jformer) is restored with a warning, unverified.
A save that fails for lack of disk space (or any OSError) raises `CheckpointWriteError` naming the steps kept.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Callable

import grain
import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from grain import checkpoint as grain_checkpoint

from jformer import coordination, paths
from jformer.checkpoint import integrity, shapes

STATE_ITEM = "state"
DATA_ITEM = "data"
DataIterator = grain.DatasetIterator | grain.DataLoaderIterator
CORRUPT_SUFFIX = ".corrupt"
FOREIGN_SUFFIX = ".foreign"  # a step whose parameters do not fit the model (another model's checkpoint).


class CheckpointWriteError(ValueError):
  """A checkpoint could not be written (e.g. the disk is full); the steps saved before it are intact."""


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
      directory: epath.PathLike,
      *,
      max_to_keep: int | None = 5,
      save_interval_steps: int = 1000,
      async_save: bool = True,
      read_only: bool = False,
      copy_arrays: bool = True,
  ):
    """Opens (and, unless `read_only`, creates) the checkpoint directory.

    Args:
      directory: where step directories live: a local path (relative ones are made absolute) or any path
        `etils.epath` knows (e.g. `gs://...`).
      max_to_keep: keep the newest this many steps and delete older ones after each save; None keeps all.
        Parameter averaging (`average_params(last=N)`) needs `max_to_keep >= N`.
      save_interval_steps: `save` writes only steps that are multiples of this (unless `force=True`);
        Orbax also saves the step `reached_preemption` agrees on after a preemption notice (multi-process).
      async_save: write in a background thread; `save` returns once the arrays are copied off the device.
      read_only: open an existing directory to restore or read params (evaluation, averaging) without
        ever writing, deleting or cleaning up in it; `save` then raises.
      copy_arrays: `save` copies each NumPy array of the state and compresses it, so the caller may change the
        arrays while an asynchronous save writes them. False writes them where they are, uncompressed: a save then
        holds no second copy of the state (a model's parameters alone, many gigabytes: `save_run_params`), and the
        caller leaves them unchanged until `wait`.
    """
    if max_to_keep is not None and (not isinstance(max_to_keep, int) or max_to_keep < 1):
      raise ValueError(f"max_to_keep must be a positive int or None (keep all), got {max_to_keep!r}.")
    if not isinstance(save_interval_steps, int) or save_interval_steps < 1:
      raise ValueError(f"save_interval_steps must be a positive int, got {save_interval_steps!r}.")
    self._directory = paths.absolute(directory)
    self._read_only = read_only
    self._kept = _KeptSteps()
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
          preservation_policy=policies.AnyPreservationPolicy([policies.LatestN(max_to_keep), self._kept]),
          cleanup_tmp_directories=True,
          enable_async_checkpointing=async_save,
      )
    self._manager = ocp.CheckpointManager(self._directory, options=options,
                                          handler_registry=_handler_registry(copy_arrays))
    self._unsealed: list[int] = []  # steps this Checkpointer saved that have no manifest yet.
    self._when_saved: list[tuple[int, Callable[[], None]]] = []  # (step, write) of `when_saved`, in call order.
    self._write_failed = False  # a save raised CheckpointWriteError: close() then only releases resources.
    self._verified: set[int] = set()  # steps that matched their manifest (a step is hashed once, not per read).

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
    if not (force or self._manager.should_save(step)):
      return False
    self.wait()  # the previous save's manifest (Orbax would wait for that save anyway).
    self._verified.discard(step)
    try:
      self._manager.save(step, args=ocp.args.Composite(**args), force=force)
    except Exception as e:
      self._raise_write_error(e, step)
    self._unsealed.append(step)
    if not self._manager.is_saving_in_progress():
      self.wait()
    return True

  def should_save(self, step: int) -> bool:
    """Whether `save(step, ...)` (without `force`) would write checkpoint `step` (see `save`)."""
    return not self._read_only and self._manager.should_save(_as_step(step))

  def keep(self, steps: Sequence[int], *, why: str = "averaging") -> None:
    """Never deletes checkpoints at `steps` (beside the newest `max_to_keep`), e.g. those a run will average
    (`why="averaging"`) or its best (`why="best"`); replaces the steps a previous call with the same `why` kept
    (they are then deleted at the next save, if not among the newest nor kept for another reason)."""
    self._kept.steps[why] = frozenset(int(step) for step in steps)

  def when_saved(self, step: int, write: Callable[[], None]) -> None:
    """Calls `write()` once checkpoint `step` is on disk with its manifest: now if it is, else when `wait` (or the
    next `save`, or `close`) finds it saved; never if it is not (a kill or a failed save first). A file naming a step
    written so never names one a restore cannot find. The writes run in the order given, each after those before
    it, so a later write is never overwritten by an earlier one."""
    self._when_saved.append((_as_step(step), write))
    self._write_saved()

  def _write_saved(self) -> None:
    """Calls the `when_saved` writes whose steps are saved, in order, up to the first whose step is not."""
    saved = set(self._manager.all_steps()) - set(self._unsealed)
    while self._when_saved and self._when_saved[0][0] in saved:
      self._when_saved.pop(0)[1]()

  def reached_preemption(self, step: int) -> bool:
    """True at the step every process agreed to save at after one of them received a preemption notice
    (SIGTERM; JAX's multi-host preemption sync point, so call it with every step on every process). Always
    False in a single-process run (no `jax.distributed` client): there the caller watches for SIGTERM itself."""
    return self._manager.reached_preemption(_as_step(step))

  def latest_step(self) -> int | None:
    """The newest saved step (possibly still being written asynchronously), or None when there is none."""
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    """The saved steps, ascending; the newest may still be being written asynchronously (see `wait`)."""
    return sorted(self._manager.all_steps())

  def params_only(self, step: int) -> bool:
    """Whether checkpoint `step` holds parameters alone (`{"params": ...}`, `workdir.save_run_params`: a model
    `jformer import-hf` converted), not a training state `restore` can fill; read from its metadata, so ask it of a
    step `valid_step` returned (a corrupt step's metadata may not read)."""
    tree = self._manager.metadata(_as_step(step)).item_metadata[STATE_ITEM].tree
    return isinstance(tree, Mapping) and set(tree) == {"params"}

  def restore(self, state_template: Any, data_iterator: DataIterator | None = None, step: int | None = None, *,
              params: Mapping[str, tuple] | None = None) -> Any:
    """Restores checkpoint `step` (default: the latest) into the structure of `state_template`.

    Waits for a pending asynchronous save first, so the step just saved can be restored. The step is verified
    against its manifest; by default a corrupt latest step falls back to the newest valid one (module docstring).

    Args:
      state_template: a pytree with the saved tree's structure whose leaves say how to restore each array:
        a `jax.Array` (e.g. freshly initialised state) or a `jax.ShapeDtypeStruct` with a `sharding`
        (e.g. `jax.eval_shape(init)` with shardings added) is restored as a `jax.Array` with that
        shape, dtype and sharding; a NumPy array or scalar as that NumPy type.
      data_iterator: a grain iterator of the same pipeline as the saved one; its position is set in place (left
        at the start for a step 0 saved without one).
      step: which checkpoint; default the latest.
      params: the model's parameter shapes (`shapes.expected`): a step whose parameters do not fit is refused
        (named with what differs), or by default skipped for the newest step that fits (`valid_step`).

    Returns:
      The restored state, of the template's pytree type.
    """
    step = self.valid_step(step, params=params)
    target = abstract_state(state_template)
    restore_args = ocp.checkpoint_utils.construct_restore_args(target)
    args = {STATE_ITEM: ocp.args.PyTreeRestore(item=target, restore_args=restore_args)}
    # Step 0 (a model imported for fine-tuning, `jformer import-hf`) may hold no data position: nothing was read yet.
    if data_iterator is not None and (step or DATA_ITEM in self._manager.metadata(step).item_handlers):
      _check_iterator(data_iterator)
      if DATA_ITEM not in self._manager.metadata(step).item_handlers:
        raise ValueError(
            f"Checkpoint {step} in {self._directory} holds no data-iterator state (it was saved without "
            "`data_iterator`); restore it with data_iterator=None and position the iterator yourself."
        )
      _check_process_count(self._directory / str(step) / DATA_ITEM)
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

  def restore_params(self, step: int | None = None, *, params: Mapping[str, tuple] | None = None) -> Any:
    """Reads only the `params` subtree of checkpoint `step` (default: the latest) as NumPy arrays.

    Needs no template: the structure, shapes and dtypes come from the checkpoint's metadata, and no other
    part of the state (e.g. the optimizer moments) is read. Each process reads the whole arrays. The step is
    verified like `restore`'s (and, given the model's parameter shapes `params`, checked to fit it), and params
    holding NaN or inf raise `CorruptCheckpointError`.
    """
    return self.restore_params_and_step(step, params=params)[0]

  def restore_params_and_step(self, step: int | None = None, *, params: Mapping[str, tuple] | None = None
                              ) -> tuple[Any, int]:
    """(`restore_params`'s parameters, the step they are from: `step`, or the latest valid one that fits)."""
    step = self.valid_step(step, params=params)
    params = self._params_metadata(step)
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), params)
    args = ocp.args.PyTreeRestore(item={"params": params}, restore_args={"params": restore_args}, partial_restore=True)
    params = self._manager.restore(step, args=ocp.args.Composite(**{STATE_ITEM: args}))[STATE_ITEM]["params"]
    integrity.check_finite(params, f"checkpoint {step} in {self._directory}")
    return params, step

  def wait(self) -> None:
    """Blocks until the running asynchronous save (if any) is on disk and writes its manifest; a failed save
    raises `CheckpointWriteError` (an OSError such as a full disk) or re-raises its error."""
    try:
      self._manager.wait_until_finished()
    except Exception as e:
      self._raise_write_error(e, self._unsealed[-1] if self._unsealed else None)
    if jax.process_index() == 0:
      for step in self._unsealed:
        if (folder := self._directory / str(step)).is_dir():  # a step deleted by max_to_keep needs none.
          integrity.write_manifest(folder)
    self._unsealed = []
    self._write_saved()

  def close(self) -> None:
    """Waits for pending saves (writing their manifests) and deletions, then releases the manager's resources."""
    try:
      self.wait()
    finally:
      try:
        self._manager.close()
      except Exception:  # Orbax re-raises the failed save's error, already raised as a CheckpointWriteError.
        if not self._write_failed:
          raise

  def __enter__(self) -> Checkpointer:
    return self

  def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None):
    self.close()

  def valid_step(self, step: int | None = None, *, params: Mapping[str, tuple] | None = None) -> int:
    """`step`, checked to exist, match its manifest and (given the model's parameter shapes `params`) fit the model,
    after pending saves finish; default: the newest such step, after one warning naming the newer ones that are
    corrupt (moved aside to `<step>.corrupt` unless read-only) or do not fit (left as they are)."""
    self.wait()
    steps = self.all_steps()
    if not steps:
      raise FileNotFoundError(f"No complete checkpoint in {self._directory}.")
    misfit = lambda s: None if params is None else shapes.difference(params, self._params_metadata(s))
    if step is not None:
      step = _as_step(step)
      if step not in steps:
        raise FileNotFoundError(f"No checkpoint for step {step} in {self._directory}; the steps there are {steps}.")
      if problem := self._problem(step):
        raise integrity.CorruptCheckpointError(
            f"checkpoint {step} in {self._directory} is corrupt: {problem}; use another step (the steps there are "
            f"{steps}).")
      if problem := misfit(step):
        raise ValueError(f"checkpoint {step} in {self._directory} does not fit this model: {problem}; use the "
                         "config it was trained with, or another step")
      return step
    corrupt, foreign = {}, {}  # step -> what is wrong with it, newest first.
    for step in reversed(steps):
      if (problem := self._problem(step)) is not None:
        corrupt[step] = problem
      elif (problem := misfit(step)) is not None:
        foreign[step] = problem
      else:
        break
    else:
      if foreign:
        raise ValueError(f"no checkpoint in {self._directory} fits this model: {_steps_said(foreign)}; use the config "
                         "they were trained with, or train in a new workdir")
      raise integrity.CorruptCheckpointError(
          f"no valid checkpoint in {self._directory}: {_steps_said(corrupt)}. Restore those files from a copy, or "
          f"move {self._directory} away to start the run over.")
    if corrupt:  # a newer step is corrupt: named once, set aside, and the newest valid one restored.
      moved = self._set_aside(sorted(corrupt))
      logging.warning("corrupt checkpoint: %s in %s%s; restoring step %d instead.", _steps_said(corrupt),
                      self._directory, f", moved to {', '.join(moved)}" if moved else "", step)
    if foreign:  # a newer step of another model: named once, set aside (training saves that step again).
      moved = self._set_aside(sorted(foreign), FOREIGN_SUFFIX)
      logging.warning("checkpoint(s) that do not fit this model: %s in %s%s; restoring step %d instead.",
                      _steps_said(foreign), self._directory, f", moved to {', '.join(moved)}" if moved else "", step)
    return step

  def _params_metadata(self, step: int) -> Any:
    """The `params` subtree of checkpoint `step`'s metadata (shapes and dtypes; nothing read)."""
    tree = self._manager.metadata(step).item_metadata[STATE_ITEM].tree
    if not isinstance(tree, Mapping) or "params" not in tree:
      keys = sorted(tree) if isinstance(tree, Mapping) else type(tree).__name__
      raise ValueError(
          f"Checkpoint {step} in {self._directory} has no top-level 'params' in its state (found: {keys}); "
          "save a state with a `params` field (e.g. a TrainState dataclass)."
      )
    return tree["params"]

  def _problem(self, step: int) -> str | None:
    """Why checkpoint `step` is corrupt, or None; a step without a manifest is accepted with a warning. Process 0
    reads the files, and every process gets its verdict (`coordination.process_0_decides`); a step found valid is
    not read again by this Checkpointer."""
    if step in self._verified:
      return None
    folder = self._directory / str(step)

    def check() -> dict:
      if not integrity.has_manifest(folder):
        logging.warning("checkpoint %d in %s has no %s (saved by an older jformer, or killed right after saving): "
                        "restoring it unverified.", step, self._directory, integrity.MANIFEST)
        return {"problem": None}
      return {"problem": integrity.verify(folder)}

    problem = coordination.process_0_decides("checkpoint verified", check)["problem"]
    if problem is None:
      self._verified.add(step)
    return problem

  def _set_aside(self, steps: list[int], suffix: str = CORRUPT_SUFFIX) -> list[str]:
    """Renames `steps` to `<step><suffix>` (process 0; not when read-only) so they can be saved again."""
    if self._read_only or not steps:
      return []
    moved = [self._directory / f"{step}{suffix}" for step in steps]
    self._verified.difference_update(steps)
    if jax.process_index() == 0:
      for step, target in zip(steps, moved, strict=True):
        if target.exists():
          target.rmtree()
        (self._directory / str(step)).rename(target)
    ocp.multihost.sync_global_processes("jformer_checkpoint_set_aside")
    self._manager.reload()
    return [os.fspath(path) for path in moved]

  def _raise_write_error(self, error: Exception, step: int | None) -> None:
    """Re-raises a failed save's OSError (found in the exception's causes) as one CheckpointWriteError line."""
    cause = error
    while cause is not None and not isinstance(cause, OSError):
      cause = cause.__cause__ or cause.__context__
    if cause is None:
      raise error
    self._unsealed, self._write_failed, self._when_saved = [], True, []  # nothing may name the failed step.
    kept = sorted(int(path.name) for path in self._directory.iterdir() if path.name.isdigit())
    kept = [s for s in kept if s != step]
    raise CheckpointWriteError(
        f"could not write checkpoint {step} to {self._directory}: {cause.strerror or cause}. The steps saved before "
        f"it are intact ({kept or 'none'}); free space (or fix the folder) and rerun the same command to resume"
        f"{f' from step {kept[-1]}' if kept else ''}.") from error


class _KeptSteps:
  """An Orbax preservation policy: the checkpoints at `steps` (kept steps by why they are kept) are kept
  (`Checkpointer.keep`)."""

  def __init__(self):
    self.steps: dict[str, frozenset] = {}

  def should_preserve(self, checkpoints: Sequence[Any], *, context: Any) -> list[bool]:
    del context
    kept = frozenset().union(*self.steps.values())
    return [checkpoint.step in kept for checkpoint in checkpoints]


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


def _handler_registry(copy_arrays: bool = True) -> ocp.handlers.DefaultCheckpointHandlerRegistry:
  """Which Orbax handler reads and writes each item, so a fresh process can restore without having saved
  (`copy_arrays`: `Checkpointer`'s; any of them restores what either wrote)."""
  registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
  handlers = ocp.type_handlers
  state_handler = ocp.PyTreeCheckpointHandler() if copy_arrays else ocp.PyTreeCheckpointHandler(
      use_compression=False, type_handler_registry=handlers.create_type_handler_registry(
          (np.ndarray, handlers.NumpyHandler(deepcopy_host_arrays=False)), (jax.Array, handlers.ArrayHandler())))
  registry.add(STATE_ITEM, ocp.args.PyTreeSave, state_handler)
  registry.add(STATE_ITEM, ocp.args.PyTreeRestore, state_handler)
  data_handler = grain_checkpoint.CheckpointHandler()
  registry.add(DATA_ITEM, grain_checkpoint.CheckpointSave, data_handler)
  registry.add(DATA_ITEM, grain_checkpoint.CheckpointRestore, data_handler)
  return registry


def _steps_said(problems: Mapping[int, str]) -> str:
  return "; ".join(f"step {step} ({problem})" for step, problem in problems.items())


def _as_step(step: Any) -> int:
  """`step` as a non-negative Python int; accepts ints and integer scalar arrays."""
  try:
    value = operator.index(step)
  except TypeError as e:
    raise TypeError(f"step must be an int or an integer scalar array, got {step!r}.") from e
  if value < 0:
    raise ValueError(f"step must be >= 0, got {value}.")
  return value


def _check_process_count(data_dir: epath.Path) -> None:
  """Refuses, naming both counts, a data item written by another number of processes than this run's.

  grain saves one iterator position per process (`process_<i>-of-<n>.json`); each host's input stream is its own
  shard, shuffled and packed on its own, so positions of n hosts cannot be re-split among another number.
  """
  count = jax.process_count()
  files = data_dir.glob("process_*-of-*.json")
  saved = sorted({path.name.rsplit("-of-", 1)[-1].removesuffix(".json") for path in files})
  if saved and saved != [str(count)]:
    raise ValueError(
        f"checkpoint {data_dir.parent.name} in {data_dir.parent.parent} holds the input positions of "
        f"{' or '.join(saved)} processes, but this run has {count}: each host reads, shuffles and packs its own "
        f"shard of the data, so the data position cannot be carried over to another number of hosts. Resume with "
        f"{' or '.join(saved)} processes, or start a new --workdir (`jformer train` there starts the data from the "
        "beginning)."
    )


def _check_iterator(data_iterator: Any) -> None:
  if not isinstance(data_iterator, DataIterator):
    raise TypeError(
        f"data_iterator must be a grain DatasetIterator or DataLoaderIterator (e.g. iter(dataset.to_iter_dataset())),"
        f" got {type(data_iterator).__name__}."
    )
