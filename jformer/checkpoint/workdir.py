"""Where a training run keeps its checkpoints, and the parameters a decoder loads from them.

    <workdir>/checkpoints/   the training state every `train.checkpoint_every` steps (`Checkpointer`)
    <workdir>/averaged/      the mean parameters of the last checkpoints (`save_params`; `jformer average-checkpoints`
                             or `train.average_checkpoints`)

`workdir` is a local folder or any `etils.epath` path (gs://bucket/run).
"""

from __future__ import annotations

from typing import Any

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


def load_run_params(workdir: epath.PathLike, which: str = "auto", *, model=None) -> Any:
  """Parameters of a run: 'averaged' (<workdir>/averaged), 'latest', a step number, or 'auto' (averaged if any).

  With `model`, the parameters must fit it (`shapes.difference`): 'auto'/'latest' skip newer steps that do not (one
  warning), averaged parameters or a named step that do not are refused in one line naming what differs.
  """
  return run_params(workdir, which, model=model)[0]


def run_params(workdir: epath.PathLike, which: str = "auto", *, model=None) -> tuple[Any, str]:
  """(`load_run_params`'s parameters, which they are: 'step N of <workdir>/checkpoints' or 'the averaged parameters
  in <workdir>/averaged'), so that a command can say what it decodes with."""
  wanted = None if model is None else shapes.expected(param_shapes(model))
  averaged = averaged_dir(workdir)
  if which == "averaged" or (which == "auto" and averaged.is_dir()):
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
    params, step = checkpointer.restore_params_and_step(None if which in ("auto", "latest") else int(which),
                                                        params=wanted)
    return params, f"step {step} of {checkpointer.directory}"
