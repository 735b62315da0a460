"""Where a training run keeps its checkpoints, and the parameters a decoder loads from them.

    <workdir>/checkpoints/   the training state every `train.checkpoint_every` steps (`Checkpointer`)
    <workdir>/averaged/      the mean parameters of the last checkpoints (`save_params`; `jformer average-checkpoints`
                             or `train.average_checkpoints`)
"""

from __future__ import annotations

import os
from typing import Any

from jformer.checkpoint.averaging import load_params
from jformer.checkpoint.manager import Checkpointer


def checkpoints_dir(workdir: str) -> str:
  """`<workdir>/checkpoints`: the run's `Checkpointer` directory."""
  return os.path.join(workdir, "checkpoints")


def averaged_dir(workdir: str) -> str:
  """`<workdir>/averaged`: the run's averaged parameters."""
  return os.path.join(workdir, "averaged")


def load_run_params(workdir: str, which: str = "auto") -> Any:
  """Parameters of a run: 'averaged' (<workdir>/averaged), 'latest', a step number, or 'auto' (averaged if any)."""
  averaged = averaged_dir(workdir)
  if which == "averaged" or (which == "auto" and os.path.isdir(averaged)):
    return load_params(averaged)
  with Checkpointer(checkpoints_dir(workdir), read_only=True) as checkpointer:
    if checkpointer.latest_step() is None:
      raise FileNotFoundError(f"no checkpoints in {checkpointer.directory}; train first")
    return checkpointer.restore_params(None if which in ("auto", "latest") else int(which))
