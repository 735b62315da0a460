"""Pure train and eval steps: `train_step(state, batch) -> (state, metrics)`, `eval_step(params, batch)`.

Both are plain functions of arrays, wrapped by `jax.jit` (or `jax.pmap` with `axis_name`) by the caller.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jformer.ops.linear_cross_entropy import Sums, linear_cross_entropy_sums
from jformer.ops.tokens import PAD_ID
from jformer.train import transfer
from jformer.train.state import TrainState

# What the train step's `metrics["finite"]` flags say, in order (each True when all its values are finite).
FINITE_CHECKS = ("loss", "gradients", "updated parameters")


# A batch key of per-token loss weights (a synthetic task's answer positions: `jformer.data.synthetic.dataset`'s
# rows).
WEIGHTS_KEY = "targets_weights"


def token_weights(batch: dict) -> jax.Array:
  """The batch's `targets_weights` where it has them (loss and accuracy count only those tokens, e.g. a synthetic
  task's answers), else 1.0 on real target tokens and 0.0 on padding."""
  if WEIGHTS_KEY in batch:
    return batch[WEIGHTS_KEY].astype(jnp.float32)
  return (batch["targets"] != PAD_ID).astype(jnp.float32)


def output_loss_sums(model, params, batch: dict, label_smoothing: float, *, z_loss: float = 0.0,
                     per_row: bool = False, **apply_kwargs) -> Sums:
  """`Sums(loss, weight, correct, z_loss)` of the model's predictions of `batch["targets"]`, weighted by
  `token_weights`; with `per_row`, `correct` is `[B]`, one per row.

  The model returns its final hidden states and output embedding, and `linear_cross_entropy_sums` projects and
  scores them chunk by chunk: the same numbers as the smoothed cross-entropy and accuracy of the full logits
  (soft-capped as the model's, `model.final_logit_softcap`), without storing them (and with their gradient
  computed on the way). `z_loss`: the weight of the z-loss added to the loss (training: `model.z_loss`).
  """
  args, kwargs = model.call_arguments(batch)
  hidden, output_embedding = model.apply({"params": params}, *args, **kwargs, return_hidden=True, **apply_kwargs)
  return linear_cross_entropy_sums(hidden, output_embedding, batch["targets"], token_weights(batch), label_smoothing,
                                   logits_softcap=model.config.final_logit_softcap, z_loss=z_loss, per_row=per_row)


def make_train_step(model, tx, schedule, *, label_smoothing: float, grad_accumulation_steps: int = 1,
                    axis_name: str | None = None, attention_transfer: int = 0):
  """Builds `train_step(state, batch) -> (state, metrics)`.

  The loss is the label-smoothed cross-entropy, plus the z-loss when `model.z_loss` > 0 (`metrics["z_loss"]`
  holds that part), summed over all target tokens of the (global) batch divided by their number. With
  `grad_accumulation_steps = k` the batch `[k*b, L]` is processed as k micro-batches of b rows (a `lax.scan`;
  one optimizer update per step, same result as the full batch). With `axis_name`
  (pmap), token counts and gradients are summed across devices, so the update equals the global batch's.
  Dropout keys are `fold_in(state.rng, state.step)`: reproducible and resumable.

  A non-finite update is never applied: when the loss, the gradients' global norm or the sum of the updated
  parameters is NaN or Inf, the step keeps the old params and optimizer state, advances `step` and counts
  one more `skipped_updates`. `metrics["finite"]` holds one flag per `FINITE_CHECKS` entry,
  `metrics["skipped_updates"]` the running count and `metrics["step"]` the step just taken (the new
  `state.step`); the caller decides how many skips it tolerates.

  The first `attention_transfer` steps minimise the attention-transfer loss instead (`jformer.train.transfer`;
  `loss` is then the sum of the layers' mean squared errors, `accuracy` 0).
  """

  def lm_sums(params, micro_batch, rng):
    sums = output_loss_sums(model, params, micro_batch, label_smoothing, z_loss=model.config.z_loss,
                            deterministic=False, rngs={"dropout": rng})
    return sums.loss, (sums.weight, sums.correct, sums.z_loss)

  def transfer_sums(params, micro_batch, rng):
    del rng  # deterministic: the teacher's outputs are the target.
    weight = jnp.sum(token_weights(micro_batch))
    return transfer.transfer_loss(model, params, micro_batch) * weight, (weight, jnp.zeros(()), jnp.zeros(()))

  def loss_sums(params, micro_batch, rng, step):
    if not attention_transfer:
      return lm_sums(params, micro_batch, rng)
    return jax.lax.cond(step < attention_transfer, transfer_sums, lm_sums, params, micro_batch, rng)

  loss_and_grad = jax.value_and_grad(loss_sums, has_aux=True)

  def train_step(state: TrainState, batch: dict):
    rng = jax.random.fold_in(state.rng, state.step)
    if axis_name is not None:  # pmap: each device drops out its own shard independently.
      rng = jax.random.fold_in(rng, jax.lax.axis_index(axis_name))
    micro_batches = jax.tree.map(
        lambda x: x.reshape((grad_accumulation_steps, x.shape[0] // grad_accumulation_steps) + x.shape[1:]), batch)

    def accumulate(carry, inputs):
      index, micro_batch = inputs
      (loss_sum, weight_sum, correct, z_loss_sum), grads = carry
      (l, (w, c, z)), g = loss_and_grad(state.params, micro_batch, jax.random.fold_in(rng, index), state.step)
      return ((loss_sum + l, weight_sum + w, correct + c, z_loss_sum + z), jax.tree.map(jnp.add, grads, g)), None

    zeros = (jnp.zeros(()), jnp.zeros(()), jnp.zeros(()), jnp.zeros(()))
    ((loss_sum, weight_sum, correct, z_loss_sum), grad_sums), _ = jax.lax.scan(
        accumulate, (zeros, jax.tree.map(jnp.zeros_like, state.params)),
        (jnp.arange(grad_accumulation_steps), micro_batches))
    if axis_name is not None:
      loss_sum, weight_sum, correct, z_loss_sum, grad_sums = jax.lax.psum(
          (loss_sum, weight_sum, correct, z_loss_sum, grad_sums), axis_name)
    denominator = jnp.maximum(weight_sum, 1.0)
    grads = jax.tree.map(lambda g: g / denominator, grad_sums)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    loss, grad_norm = loss_sum / denominator, optax.tree.norm(grads)
    # NaN and Inf propagate through the norm and the sum: one reduction each tells whether all values are finite.
    finite = jnp.stack([jnp.isfinite(loss), jnp.isfinite(grad_norm), jnp.isfinite(optax.tree.sum(params))])
    apply = jnp.all(finite)
    # Which parameter's gradient went first (in `parameter_names` order), so a stop can name it: one flag per leaf.
    leaf_finite = jnp.stack([jnp.isfinite(g).all() for g in jax.tree.leaves(grads)])
    bad_leaf = jnp.where(jnp.all(leaf_finite), -1, jnp.argmin(leaf_finite)).astype(jnp.int32)
    new_state = state.replace(step=state.step + 1, params=optax.tree.where(apply, params, state.params),
                              opt_state=optax.tree.where(apply, opt_state, state.opt_state),
                              skipped_updates=state.skipped_updates + jnp.where(apply, 0, 1))
    metrics = {"loss": loss, "accuracy": correct / denominator, "z_loss": z_loss_sum / denominator,
               "tokens": weight_sum, "grad_norm": grad_norm,
               "learning_rate": schedule(state.step), "finite": finite, "bad_leaf": bad_leaf,
               "skipped_updates": new_state.skipped_updates, "step": new_state.step}
    return new_state, metrics

  return train_step


# `totals` keys that are sums over the steps they cover (the others hold the latest value or a record).
SUMMED = ("loss_sum", "correct", "z_loss_sum", "tokens", "grad_norm_sum", "steps", "skipped")


def parameter_names(params) -> list[str]:
  """Each parameter's path, 'decoder/layer_0/self_attention/query/kernel', in `jax.tree.leaves` order."""
  return [transfer.path_name(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def new_totals() -> dict:
  """Empty running totals of train-step metrics (all scalars, except the [len(FINITE_CHECKS)] flags).

  loss_sum, correct, z_loss_sum, tokens: sums of loss x tokens, accuracy x tokens, z-loss x tokens and target
  tokens; grad_norm_sum, steps: the sum of gradient norms and the number of steps; skipped: steps whose update was
  not applied; learning_rate, skipped_updates: the latest step's values; first_bad_step/first_bad_finite/
  first_bad_leaf: the first skipped step, its `FINITE_CHECKS` flags and the index of its first parameter with a
  non-finite gradient (in `parameter_names` order; -1: none); stop_step/stop_finite/stop_leaf: the same of the first
  step whose skip went beyond the allowance (steps are -1 until such a step happens).
  """
  zero, none = jnp.zeros((), jnp.float32), jnp.full((), -1, jnp.int32)
  count, finite = jnp.zeros((), jnp.int32), jnp.ones((len(FINITE_CHECKS),), bool)
  return {"loss_sum": zero, "correct": zero, "z_loss_sum": zero, "tokens": zero, "grad_norm_sum": zero,
          "steps": count, "skipped": count, "learning_rate": zero, "skipped_updates": count, "first_bad_step": none,
          "first_bad_finite": finite, "first_bad_leaf": none, "stop_step": none, "stop_finite": finite,
          "stop_leaf": none}


def add_to_totals(totals: dict, metrics: dict, *, allowed_skips: int) -> dict:
  """`totals` (see `new_totals`) with one train step's `metrics` added: pure and on device, so a loop can keep
  training without reading anything back and look at the totals only every so many steps. A step is beyond the
  allowance when the run's skipped updates (carried over resumes) exceed `allowed_skips`."""
  bad = ~jnp.all(metrics["finite"])
  first = bad & (totals["first_bad_step"] < 0)
  stop = (metrics["skipped_updates"] > allowed_skips) & (totals["stop_step"] < 0)
  tokens = metrics["tokens"]
  return {
      "loss_sum": totals["loss_sum"] + metrics["loss"] * tokens,
      "correct": totals["correct"] + metrics["accuracy"] * tokens,
      "z_loss_sum": totals["z_loss_sum"] + metrics["z_loss"] * tokens,
      "tokens": totals["tokens"] + tokens,
      "grad_norm_sum": totals["grad_norm_sum"] + metrics["grad_norm"],
      "steps": totals["steps"] + 1,
      "skipped": totals["skipped"] + bad.astype(jnp.int32),
      "learning_rate": metrics["learning_rate"].astype(jnp.float32),
      "skipped_updates": metrics["skipped_updates"],
      "first_bad_step": jnp.where(first, metrics["step"], totals["first_bad_step"]),
      "first_bad_finite": jnp.where(first, metrics["finite"], totals["first_bad_finite"]),
      "first_bad_leaf": jnp.where(first, metrics["bad_leaf"], totals["first_bad_leaf"]),
      "stop_step": jnp.where(stop, metrics["step"], totals["stop_step"]),
      "stop_finite": jnp.where(stop, metrics["finite"], totals["stop_finite"]),
      "stop_leaf": jnp.where(stop, metrics["bad_leaf"], totals["stop_leaf"]),
  }


def averages(sums: dict) -> dict:
  """Loss, accuracy and z-loss per target token, gradient norm per step and the latest learning rate, from
  host-read totals summed over any number of reads (`SUMMED` keys added, `learning_rate` the latest)."""
  tokens = max(sums["tokens"], 1.0)
  return {"loss": sums["loss_sum"] / tokens, "accuracy": sums["correct"] / tokens,
          "z_loss": sums["z_loss_sum"] / tokens,
          "grad_norm": sums["grad_norm_sum"] / max(sums["steps"], 1), "learning_rate": sums["learning_rate"]}


def make_eval_step(model, *, axis_name: str | None = None):
  """Builds `eval_step(params, batch) -> {nll_sum, correct, tokens}` (no smoothing, no dropout; sums).

  A batch with `targets_weights` (`WEIGHTS_KEY`) also gives `examples`, its rows with a weight, and `exact`, those
  whose every weighted token is predicted right (a synthetic task's whole-example exact match)."""

  def eval_step(params, batch: dict):
    weighted = WEIGHTS_KEY in batch
    sums = output_loss_sums(model, params, batch, 0.0, per_row=weighted, deterministic=True)  # no z-loss: the NLL.
    out = {"nll_sum": sums.loss, "correct": jnp.sum(sums.correct), "tokens": sums.weight}
    if weighted:
      weights_B = jnp.sum(token_weights(batch), axis=1)
      out["examples"] = jnp.sum(weights_B > 0).astype(jnp.float32)
      out["exact"] = jnp.sum((weights_B > 0) & (sums.correct >= weights_B)).astype(jnp.float32)
    return jax.lax.psum(out, axis_name) if axis_name is not None else out

  return eval_step

