"""Pure train and eval steps: `train_step(state, batch) -> (state, metrics)`, `eval_step(params, batch)`.

Both are plain functions of arrays, wrapped by `jax.jit` (or `jax.pmap` with `axis_name`) by the caller.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jformer.ops.linear_cross_entropy import linear_cross_entropy
from jformer.ops.tokens import PAD_ID
from jformer.train.state import TrainState

# What the train step's `metrics["finite"]` flags say, in order (each True when all its values are finite).
FINITE_CHECKS = ("loss", "gradients", "updated parameters")


def token_weights(batch: dict) -> jax.Array:
  """1.0 on real target tokens, 0.0 on padding."""
  return (batch["targets"] != PAD_ID).astype(jnp.float32)


def output_loss_sums(model, params, batch: dict, label_smoothing: float, **apply_kwargs):
  """(loss_sum, weight_sum, correct_sum) of the model's predictions of `batch["targets"]`.

  The model returns its final hidden states and output embedding, and `linear_cross_entropy` projects and
  scores them chunk by chunk: the same numbers as the smoothed cross-entropy and accuracy of the full logits,
  without storing them (and with their gradient computed on the way).
  """
  args, kwargs = model.call_arguments(batch)
  hidden, output_embedding = model.apply({"params": params}, *args, **kwargs, return_hidden=True, **apply_kwargs)
  return linear_cross_entropy(hidden, output_embedding, batch["targets"], token_weights(batch), label_smoothing)


def make_train_step(model, tx, schedule, *, label_smoothing: float, grad_accumulation_steps: int = 1,
                    axis_name: str | None = None):
  """Builds `train_step(state, batch) -> (state, metrics)`.

  The loss is the label-smoothed cross-entropy summed over all target tokens of the (global) batch divided by
  their number. With `grad_accumulation_steps = k` the batch `[k*b, L]` is processed as k micro-batches of b
  rows (a `lax.scan`; one optimizer update per step, same result as the full batch). With `axis_name`
  (pmap), token counts and gradients are summed across devices, so the update equals the global batch's.
  Dropout keys are `fold_in(state.rng, state.step)`: reproducible and resumable.

  A non-finite update is never applied: when the loss, the gradients' global norm or the sum of the updated
  parameters is NaN or Inf, the step keeps the old params and optimizer state, advances `step` and counts
  one more `skipped_updates`. `metrics["finite"]` holds one flag per `FINITE_CHECKS` entry and
  `metrics["skipped_updates"]` the running count; the caller decides how many skips it tolerates.
  """

  def loss_sums(params, micro_batch, rng):
    loss_sum, weight_sum, correct = output_loss_sums(model, params, micro_batch, label_smoothing,
                                                     deterministic=False, rngs={"dropout": rng})
    return loss_sum, (weight_sum, correct)

  loss_and_grad = jax.value_and_grad(loss_sums, has_aux=True)

  def train_step(state: TrainState, batch: dict):
    rng = jax.random.fold_in(state.rng, state.step)
    if axis_name is not None:  # pmap: each device drops out its own shard independently.
      rng = jax.random.fold_in(rng, jax.lax.axis_index(axis_name))
    micro_batches = jax.tree.map(
        lambda x: x.reshape((grad_accumulation_steps, x.shape[0] // grad_accumulation_steps) + x.shape[1:]), batch)

    def accumulate(carry, inputs):
      index, micro_batch = inputs
      (loss_sum, weight_sum, correct), grads = carry
      (l, (w, c)), g = loss_and_grad(state.params, micro_batch, jax.random.fold_in(rng, index))
      return ((loss_sum + l, weight_sum + w, correct + c), jax.tree.map(jnp.add, grads, g)), None

    zeros = (jnp.zeros(()), jnp.zeros(()), jnp.zeros(()))
    ((loss_sum, weight_sum, correct), grad_sums), _ = jax.lax.scan(
        accumulate, (zeros, jax.tree.map(jnp.zeros_like, state.params)),
        (jnp.arange(grad_accumulation_steps), micro_batches))
    if axis_name is not None:
      loss_sum, weight_sum, correct, grad_sums = jax.lax.psum((loss_sum, weight_sum, correct, grad_sums), axis_name)
    denominator = jnp.maximum(weight_sum, 1.0)
    grads = jax.tree.map(lambda g: g / denominator, grad_sums)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    loss, grad_norm = loss_sum / denominator, optax.tree.norm(grads)
    # NaN and Inf propagate through the norm and the sum: one reduction each tells whether all values are finite.
    finite = jnp.stack([jnp.isfinite(loss), jnp.isfinite(grad_norm), jnp.isfinite(optax.tree.sum(params))])
    apply = jnp.all(finite)
    new_state = state.replace(step=state.step + 1, params=optax.tree.where(apply, params, state.params),
                              opt_state=optax.tree.where(apply, opt_state, state.opt_state),
                              skipped_updates=state.skipped_updates + jnp.where(apply, 0, 1))
    metrics = {"loss": loss, "accuracy": correct / denominator, "tokens": weight_sum, "grad_norm": grad_norm,
               "learning_rate": schedule(state.step), "finite": finite, "skipped_updates": new_state.skipped_updates}
    return new_state, metrics

  return train_step


def make_eval_step(model, *, axis_name: str | None = None):
  """Builds `eval_step(params, batch) -> {nll_sum, correct, tokens}` (no smoothing, no dropout; sums)."""

  def eval_step(params, batch: dict):
    nll_sum, tokens, correct = output_loss_sums(model, params, batch, 0.0, deterministic=True)
    sums = {"nll_sum": nll_sum, "correct": correct, "tokens": tokens}
    return jax.lax.psum(sums, axis_name) if axis_name is not None else sums

  return eval_step

