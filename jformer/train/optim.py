"""The paper's optimizer (Sec. 5.3): Adam(0.9, 0.98, 1e-9) with warm-up then inverse-square-root decay, and an
optional linear cool-down over the run's last steps."""

from __future__ import annotations

import jax.numpy as jnp
import optax

from jformer.config.schema import OptimizerSection


def cooldown_steps(total_steps: int | None, cooldown_fraction: float) -> int:
  """C, the cool-down's length: round(f * S) steps, at least 1 (0 without a fraction or a total)."""
  return max(round(cooldown_fraction * total_steps), 1) if total_steps and cooldown_fraction else 0


def paper_schedule(d_model: int, warmup_steps: int, scale: float = 1.0, *, total_steps: int | None = None,
                   cooldown_fraction: float = 0.0):
  """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (paper eq. 3), step from 1.

  With `cooldown_fraction` f > 0 and `total_steps` S, the last C = round(f * S) steps multiply it by a linear ramp
  from 1 down to 1/C: lrate * min(1, (S + 1 - step) / C), the "rsqrt with linear cool-down" of Zhai et al. (2022,
  Scaling Vision Transformers) that a run of known length ends with. The steps before the cool-down are eq. 3
  unchanged, so a schedule built before S is known (a time budget plans it after its first steps) agrees with
  the final one up to the cool-down. `total_steps=None`: eq. 3 alone.

  Returns an optax schedule of the update count (0-based, so update n uses step n + 1).
  """
  if warmup_steps <= 0:
    raise ValueError(f"optimizer.warmup_steps must be positive, got {warmup_steps}")
  cooldown = cooldown_steps(total_steps, cooldown_fraction)

  def schedule(count):
    step = jnp.asarray(count, jnp.float32) + 1.0
    lrate = scale * d_model**-0.5 * jnp.minimum(step**-0.5, step * warmup_steps**-1.5)
    if cooldown:
      lrate = lrate * jnp.minimum(1.0, (total_steps + 1.0 - step) / cooldown)
    return lrate

  return schedule


def build_optimizer(optimizer: OptimizerSection, d_model: int, total_steps: int | None = None):
  """(optax transformation, learning-rate schedule) of the `optimizer` settings, for a run of `total_steps` steps (its
  cool-down, if `optimizer.cooldown_fraction` > 0; None: not known yet, eq. 3 alone)."""
  schedule = paper_schedule(d_model, optimizer.warmup_steps, optimizer.learning_rate_scale,
                            total_steps=total_steps, cooldown_fraction=optimizer.cooldown_fraction)
  adam = optax.adamw(schedule, b1=optimizer.b1, b2=optimizer.b2, eps=optimizer.eps, weight_decay=optimizer.weight_decay)
  if optimizer.grad_clip_norm > 0:
    return optax.chain(optax.clip_by_global_norm(optimizer.grad_clip_norm), adam), schedule
  return adam, schedule
