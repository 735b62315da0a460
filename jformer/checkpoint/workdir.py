"""Where a training run keeps its checkpoints, and the parameters a decoder loads from them.

    <workdir>/checkpoints/   the training state every `train.checkpoint_every` steps (`Checkpointer`); an imported
                             model's step 0 holds its parameters alone (`save_run_params`)
    <workdir>/averaged/      the mean parameters of the last checkpoints (`save_params`; `jformer average-checkpoints`
                             or `train.average_checkpoints`)
    <workdir>/best.json      the step of the best checkpoint by `train.keep_best`'s valid metric, kept among the
                             checkpoints (`jformer.train.selection` writes it)

`workdir` is a local folder or any `etils.epath` path (gs://bucket/run).
"""

from __future__ import annotations

import json
from typing import Any

import jax
import numpy as np
from absl import logging
from etils import epath

from jformer.checkpoint import shapes
from jformer.checkpoint.averaging import load_params
from jformer.checkpoint.manager import Checkpointer
from jformer.models.summary import param_shapes


def checkpoints_dir(workdir: epath.PathLike) -> epath.Path:
  """`<workdir>/checkpoints`: the run's `Checkpointer` directory."""
  return epath.Path(workdir) / "checkpoints"


def averaged_dir(workdir: epath.PathLike) -> epath.Path:
  """`<workdir>/averaged`: the run's averaged parameters."""
  return epath.Path(workdir) / "averaged"


def best_path(workdir: epath.PathLike) -> epath.Path:
  """`<workdir>/best.json`: the run's best checkpoint by its kept metric (`jformer.train.selection`)."""
  return epath.Path(workdir) / "best.json"


def read_best(workdir: epath.PathLike) -> dict:
  """`best.json` of the run in `workdir` ({} when it keeps no best checkpoint): the metric, and the step and value of
  its best evaluation (None before the first)."""
  path = best_path(workdir)
  return json.loads(path.read_text()) if path.exists() else {}


def which_params(workdir: epath.PathLike, which: str = "auto") -> str:
  """What `load_run_params(workdir, which)` loads: 'averaged', 'latest' or a step number (as text). 'auto' is what
  the run tested: its averaged parameters if any, else its best checkpoint (`train.keep_best`), else the latest;
  'best' is the step of the best checkpoint.

  A best.json naming a step that is not among the checkpoints (an older jformer wrote it before the step's
  asynchronous save finished, and the run was killed; or the step's folder was deleted) is named in one line: 'auto'
  warns and loads the latest checkpoint, 'best' is refused with `--checkpoint=latest` as the fix."""
  if which == "auto" and averaged_dir(workdir).is_dir():
    return "averaged"
  if which in ("auto", "best"):
    best = read_best(workdir).get("step")
    if best is not None and (checkpoints_dir(workdir) / str(best)).is_dir():
      return str(best)
    if best is not None:
      missing = (f"{best_path(workdir)} names step {best} as the best checkpoint, but {checkpoints_dir(workdir)} has "
                 f"no step {best} (the run was stopped before its save finished, or the folder was deleted)")
      if which == "best":
        raise FileNotFoundError(f"{missing}; use --checkpoint=latest, or a step number that is there")
      logging.warning("%s; loading the latest checkpoint instead (--checkpoint=latest)", missing)
    if which == "best":
      raise FileNotFoundError(f"the run in {workdir} kept no best checkpoint ({best_path(workdir)} names none: "
                              "train.keep_best='none', or no evaluation yet); use --checkpoint=latest")
    return "latest"
  return which


def save_run_params(workdir: epath.PathLike, params: Any) -> None:
  """Writes `params` (a pytree of arrays, kept in their dtypes) as step 0 of the run in `workdir`, without an optimizer
  state: what `jformer import-hf` writes. Decoding loads it like any step (`load_run_params`); `jformer train` sees
  it holds parameters alone (`Checkpointer.params_only`) and starts from them with a fresh optimizer state."""
  with Checkpointer(checkpoints_dir(workdir), copy_arrays=False) as checkpointer:  # no second copy of a big model.
    checkpointer.save(0, {"params": jax.tree.map(np.asarray, params)}, force=True)


def load_run_params(workdir: epath.PathLike, which: str = "auto", *, model=None) -> Any:
  """Parameters of a run: 'averaged' (<workdir>/averaged), 'best' (its best checkpoint by `train.keep_best`),
  'latest', a step number, or 'auto' (what the run tested: `which_params`).

  With `model`, the parameters must fit it (`shapes.difference`): 'latest' skips newer steps that do not (one
  warning), averaged parameters or a named step that do not are refused in one line naming what differs.
  """
  return run_params(workdir, which, model=model)[0]


def run_params(workdir: epath.PathLike, which: str = "auto", *, model=None) -> tuple[Any, str]:
  """(`load_run_params`'s parameters, which they are: 'step N of <workdir>/checkpoints' or 'the averaged parameters
  in <workdir>/averaged'), so that a command can say what it decodes with."""
  wanted = None if model is None else shapes.expected(param_shapes(model))
  which = which_params(workdir, which)
  averaged = averaged_dir(workdir)
  if which == "averaged":
    params = load_params(averaged)
    if wanted is not None and (problem := shapes.difference(wanted, params)):
      raise ValueError(f"the averaged parameters in {averaged} do not fit this model: {problem}; average again "
                       "(jformer average-checkpoints) or use --checkpoint=latest")
    return params, f"the averaged parameters in {averaged}"
  directory = checkpoints_dir(workdir)
  if not directory.is_dir():
    raise FileNotFoundError(f"no checkpoints in {directory}; train first (jformer train --workdir={workdir}), or let "
                            "the run reach its first train.checkpoint_every step.")
  with Checkpointer(directory, read_only=True) as checkpointer:
    if checkpointer.latest_step() is None:
      raise FileNotFoundError(f"no checkpoints in {checkpointer.directory}; train first (jformer train "
                              f"--workdir={workdir}), or let the run reach its first train.checkpoint_every step.")
    params, step = checkpointer.restore_params_and_step(None if which == "latest" else int(which),
                                                        params=wanted)
    return params, f"step {step} of {checkpointer.directory}"
