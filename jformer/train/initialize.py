"""`train.initialize_from`: a run that starts from another run's parameters (a trained one, or one `jformer
import-hf` wrote), e.g. the softmax model a changed `model.layer_pattern` converts (attention surgery,
`jformer.train.transfer`); and `with_params`, a fresh training state holding given parameters, which both that and
the first start of an imported run (its step 0 holds parameters alone) begin from."""

from __future__ import annotations

import jax
import numpy as np
from etils import epath
from flax import traverse_util

from jformer import checkpoint, data, paths
from jformer import config as config_lib
from jformer.config import RunSettings
from jformer.data.workdir import VOCAB_CHECKSUM
from jformer.parallel import say


def check_source(settings: RunSettings, workdir: epath.PathLike) -> None:
  """Refuses, before anything is written, a `train.initialize_from` that is not a run, or a run that would train its
  own vocabulary instead of the source's (naming the file to give as data.vocab_path)."""
  if not settings.train.initialize_from or (epath.Path(workdir) / "checkpoints").exists():
    return
  source = paths.absolute(settings.train.initialize_from)
  source_vocab = data.vocab_path(config_lib.read_run(source), source)
  if not settings.data.vocab_path:
    raise ValueError(f"train.initialize_from={source}: its parameters belong to its vocabulary; set "
                     f"--config.data.vocab_path={source_vocab}")


def start_from(settings: RunSettings, workdir: epath.PathLike, runner, state):
  """`state` (freshly initialised) with every parameter the source run has at the same path copied from its
  checkpoint (`load_run_params`: averaged if any, else the latest); the others keep their initial values (a new
  variant's own), named in one line.

  Raises:
    ValueError: the source was trained on another vocabulary than this run's, a parameter of both has another
      shape, or a source parameter has no place in this model (another depth or width: not the same model).
  """
  source = paths.absolute(settings.train.initialize_from)
  problem = paths.checksum_problem(data.vocab_path(settings.config, workdir), source / "vocab" / VOCAB_CHECKSUM)
  if problem:
    raise ValueError(f"train.initialize_from={source} was trained on another vocabulary ({problem}); set "
                     "data.vocab_path to the vocabulary file in its vocab/ folder")
  pretrained = traverse_util.flatten_dict(checkpoint.load_run_params(source), sep="/")
  own = traverse_util.flatten_dict(jax.device_get(runner.checkpoint_view(state).params), sep="/")
  shapes = [f"{path} {pretrained[path].shape} (this model: {value.shape})" for path, value in own.items()
            if path in pretrained and pretrained[path].shape != value.shape]
  unused = sorted(set(pretrained) - set(own))
  if shapes or unused:
    raise ValueError(f"train.initialize_from={source} holds parameters this model cannot take: "
                     + "; ".join(shapes + [f"{path} (no such parameter here)" for path in unused[:8]]))
  kept = sorted(set(own) - set(pretrained))
  say(f"initialized from {source}: {len(own) - len(kept)} of {len(own)} parameters copied"
      + (f"; new (initial values): {', '.join(kept[:6])}" + (f" and {len(kept) - 6} more" if len(kept) > 6 else "")
         if kept else ""))
  return with_params(runner, state, traverse_util.unflatten_dict(pretrained, sep="/"))


def with_params(runner, state, params):
  """`state` (freshly initialised: its optimizer state, step 0 and rng) holding the host arrays `params` (a nested
  dict) where it has their paths, each cast to the state's dtype (bfloat16 pretrained weights train as the model's
  float32 parameters) and laid out as its parameters: a run that starts from a model's parameters alone (`train.
  initialize_from`, or an imported model's step 0). Its optimizer state is the fresh one: Adam's moments and count
  start at zero whatever the parameters are."""
  given = traverse_util.flatten_dict(params, sep="/")
  own = traverse_util.flatten_dict(jax.device_get(runner.checkpoint_view(state).params), sep="/")
  merged = {path: np.asarray(given.get(path, value), value.dtype) for path, value in own.items()}
  return state.replace(params=runner.device_params(traverse_util.unflatten_dict(merged, sep="/")))
