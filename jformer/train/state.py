"""The training state: a plain pytree of arrays (what is checkpointed and sharded)."""

from __future__ import annotations

from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class TrainState:
  """step (int32 scalar), params, opt_state (optax), rng (base key; step keys are `fold_in(rng, step)`)."""
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array


def init_train_state(model, tx, rng: jax.Array, batch: dict, *, boxed: bool = False) -> TrainState:
  """Initialises parameters from the shapes of `batch` (a dict with 'inputs'/'targets') and the optimizer.

  With `boxed=True` parameters and optimizer moments keep their `nn.LogicallyPartitioned` boxes (logical axis
  names, from which `jformer.parallel` derives shardings); otherwise they are plain arrays.
  """
  init_rng, train_rng = jax.random.split(rng)
  params = model.init(init_rng, *model_inputs(model, batch))["params"]
  state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params), rng=train_rng)
  return state if boxed else nn.meta.unbox(state)


def model_inputs(model, batch: dict) -> tuple:
  """Positional model arguments from a batch: (inputs, targets) for the Transformer, (targets,) for the LM."""
  from jformer.models import Transformer

  return (batch["inputs"], batch["targets"]) if isinstance(model, Transformer) else (batch["targets"],)


def model_kwargs(model, batch: dict) -> dict:
  """Packing keyword arguments present in `batch`."""
  from jformer.models import Transformer

  if isinstance(model, Transformer):
    names = {"inputs_position": "inputs_positions", "targets_position": "targets_positions",
             "inputs_segmentation": "inputs_segmentation", "targets_segmentation": "targets_segmentation"}
  else:
    names = {"targets_position": "positions", "targets_segmentation": "segmentation"}
  return {arg: batch[key] for key, arg in names.items() if key in batch}
