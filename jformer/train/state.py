"""The training state: a plain pytree of arrays (what is checkpointed and sharded)."""

from __future__ import annotations

from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class TrainState:
  """step (int32 scalar), params, opt_state (optax), rng (base key; step keys are `fold_in(rng, step)`),
  skipped_updates (int32 scalar: steps whose non-finite update was not applied, see `jformer.train.step`)."""
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array
  skipped_updates: jax.Array


def init_train_state(model, tx, rng: jax.Array, batch: dict, *, boxed: bool = False) -> TrainState:
  """Initialises parameters from the shapes of `batch` (a dict with 'inputs'/'targets') and the optimizer.

  With `boxed=True` parameters and optimizer moments keep their `nn.LogicallyPartitioned` boxes (logical axis
  names, from which `jformer.train.runner` derives shardings by `jformer.parallel`'s rules); otherwise they are
  plain arrays. `batch` is passed as the model's teacher-forced call (`model.call_arguments`).
  """
  init_rng, train_rng = jax.random.split(rng)
  args, kwargs = model.call_arguments(batch)
  params = model.init(init_rng, *args, **kwargs)["params"]
  state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params), rng=train_rng,
                     skipped_updates=jnp.zeros((), jnp.int32))
  return state if boxed else nn.meta.unbox(state)
