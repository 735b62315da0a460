"""The paper's optimizer (Sec. 5.3): Adam(0.9, 0.98, 1e-9) with warm-up then inverse-square-root decay."""

from __future__ import annotations

import jax.numpy as jnp
import optax


def paper_schedule(d_model: int, warmup_steps: int, scale: float = 1.0):
  """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (paper eq. 3), step from 1.

  Returns an optax schedule of the update count (0-based, so update n uses step n + 1).
  """
  if warmup_steps <= 0:
    raise ValueError(f"optimizer.warmup_steps must be positive, got {warmup_steps}")

  def schedule(count):
    step = jnp.asarray(count, jnp.float32) + 1.0
    return scale * d_model**-0.5 * jnp.minimum(step**-0.5, step * warmup_steps**-1.5)

  return schedule


def build_optimizer(optimizer_config, d_model: int):
  """(optax transformation, learning-rate schedule) from `config.optimizer`."""
  schedule = paper_schedule(d_model, optimizer_config.warmup_steps, optimizer_config.learning_rate_scale)
  adam = optax.adamw(schedule, b1=optimizer_config.b1, b2=optimizer_config.b2, eps=optimizer_config.eps,
                     weight_decay=optimizer_config.weight_decay)
  if optimizer_config.grad_clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(optimizer_config.grad_clip_norm), adam), schedule
  return adam, schedule
