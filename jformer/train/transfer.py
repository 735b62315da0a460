"""Attention transfer (LoLCATs, Zhang et al. 2025) as a training objective, and which parameters a step trains:
for the first `train.attention_transfer` steps only a replacing variant's own parameters train, against the model's
own attention as teacher; then `train.trainable`'s. Freezing wraps the optimizer (`freezing`), so the optimizer
state keeps one structure. Behaviour in full: docs/training.md (attention transfer).
"""

from __future__ import annotations

import re
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jformer.config import RunSettings
from jformer.models import TransformerConfig, surgery
from jformer.models.layers import TRANSFER
from jformer.train import optim


def own_parameter(model_config: TransformerConfig) -> Callable[[str], bool]:
  """path -> whether it is a parameter a replacing variant owns (created under `self_attention/<variant>/` by
  `MultiHeadAttention`): what attention transfer trains."""
  names = surgery.learned_replacements(model_config)
  pattern = re.compile(rf".*self_attention/({'|'.join(map(re.escape, names))})/.*") if names else None
  return lambda path: bool(pattern and pattern.fullmatch(path))


def trainable_parameter(regex: str) -> Callable[[str], bool]:
  """path -> whether `train.trainable` trains it ('' = every parameter)."""
  pattern = re.compile(regex) if regex else None
  return lambda path: pattern is None or bool(pattern.fullmatch(path))


def path_name(key_path) -> str:
  """A pytree key path as "a/b/0" (dict keys, attribute names and sequence indices)."""
  return "/".join(str(getattr(key, "key", getattr(key, "name", getattr(key, "idx", key)))) for key in key_path)


class FreezingState(NamedTuple):
  count: jax.Array  # updates applied so far: the step.
  inner: optax.OptState


def freezing(tx: optax.GradientTransformation, *, transfer_steps: int, own: Callable[[str], bool],
             trainable: Callable[[str], bool]) -> optax.GradientTransformation:
  """`tx` with the gradients and updates of frozen parameters zeroed: before step `transfer_steps` every parameter
  but those `own` names, after it those `trainable` does not name (so a weight decay leaves them alone too, and a
  gradient clip sees the trained ones only)."""

  def masks(params, count):
    in_transfer = count < transfer_steps
    return jax.tree_util.tree_map_with_path(lambda path, _: jnp.where(
        in_transfer, own(path_name(path)), trainable(path_name(path))).astype(jnp.float32), params)

  def init(params):
    return FreezingState(jnp.zeros((), jnp.int32), tx.init(params))

  def update(grads, state, params=None):
    mask = masks(grads, state.count)
    grads = jax.tree.map(lambda g, m: g * m.astype(g.dtype), grads, mask)
    updates, inner = tx.update(grads, state.inner, params)
    updates = jax.tree.map(lambda u, m: u * m.astype(u.dtype), updates, mask)
    return updates, FreezingState(state.count + 1, inner)

  return optax.GradientTransformation(init, update)


def run_optimizer(settings: RunSettings, total_steps: int | None = None):
  """(optax transformation, schedule) of a run: `optim.build_optimizer`, wrapped by `freezing` when the run
  transfers attention or trains only some parameters (`train.attention_transfer`, `train.trainable`)."""
  tx, schedule = optim.build_optimizer(settings.optimizer, settings.model.d_model, total_steps)
  train = settings.train
  if not train.attention_transfer and not train.trainable:
    return tx, schedule
  return freezing(tx, transfer_steps=train.attention_transfer, own=own_parameter(settings.model),
                  trainable=trainable_parameter(train.trainable)), schedule


def transfer_loss(model, params, batch: dict) -> jax.Array:
  """The sum over the replacing layers of each one's mean squared error against its teacher (docs/training.md), the
  model run deterministically with the 'transfer' collection mutable."""
  args, kwargs = model.call_arguments(batch)
  _, variables = model.apply({"params": params}, *args, **kwargs, deterministic=True, return_hidden=True,
                             mutable=[TRANSFER])
  sown = jax.tree_util.tree_flatten_with_path(variables.get(TRANSFER, {}))[0]
  errors = {path_name(path[:-2]): value for path, value in sown
            if path_name(path).endswith("squared_error/0")}
  counts = {path_name(path[:-2]): value for path, value in sown if path_name(path).endswith("count/0")}
  if not errors:
    raise ValueError("attention transfer found no layer to transfer: none sows its error (a layer kind must replace "
                     "the model's attention; model.remat must be 'none' below its 'auto' threshold)")
  return sum(errors[layer] / jnp.maximum(counts[layer], 1.0) for layer in sorted(errors))
