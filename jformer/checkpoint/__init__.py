"""Checkpoints of training runs, and parameter averaging over the last ones.

- `Checkpointer` (over `orbax.checkpoint.CheckpointManager`): asynchronous, atomic saves of the training
  state together with the grain data-iterator position, every `save_interval_steps`, keeping the last
  `max_to_keep`; restore into a template's structure, dtypes and shardings; `restore_params` reads only params.
- `average_params(directory, last)`: the mean of the params of the last checkpoints (paper Sec. 6.1: 5 for
  base, 20 for big models); `save_params`/`load_params`: a params-only checkpoint for decoding.
- `load_run_params(workdir, which)`: the parameters a decoder uses from a run's workdir (averaged, best, latest or a
  step; by default what the run tested, `which_params`; `run_params` also says which); `checkpoints_dir` /
  `averaged_dir` / `best_path`: where the run keeps them; `save_run_params(workdir, params)`: a run's step 0 of
  parameters alone (an imported model), which `jformer train` starts from with a fresh optimizer state.
- `integrity`: sha256 manifests written with every save and verified on restore (`CorruptCheckpointError`); a save
  that fails (e.g. a full disk) raises `CheckpointWriteError`.
"""

from jformer.checkpoint import shapes
from jformer.checkpoint.averaging import average_params, load_params, save_params
from jformer.checkpoint.integrity import CorruptCheckpointError
from jformer.checkpoint.manager import Checkpointer, CheckpointWriteError, abstract_state
from jformer.checkpoint.workdir import (averaged_dir, best_path, checkpoints_dir, load_run_params, read_best,
                                       run_params, save_run_params, which_params)

__all__ = ["Checkpointer", "CheckpointWriteError", "CorruptCheckpointError", "abstract_state", "average_params",
           "averaged_dir", "best_path", "checkpoints_dir", "load_params", "load_run_params", "read_best", "run_params",
           "save_params", "save_run_params", "shapes", "which_params"]
