"""What every task's evaluation shares: this host's share of a batch, eval-step sums, token-level metrics, and the
valid metrics a run may keep its best checkpoint by."""

from __future__ import annotations

import math

import jax

# `train.keep_best`: the valid metrics a run may keep its best checkpoint by (`jformer.train.selection`), each with
# whether a higher value is better; a task offers some of them (its `kept_metrics`). "none" keeps no best checkpoint.
KEPT_METRICS = {"valid_loss": False, "valid_bleu": True, "valid_bits_per_byte": False}
NO_KEPT_METRIC = "none"


def per_host(total: int, what: str) -> int:
  """`total` rows (all hosts) -> rows of this host; refuses a total the hosts do not divide."""
  hosts = jax.process_count()
  if total % hosts:
    raise ValueError(f"{what}={total} is not divisible by the {hosts} hosts")
  return total // hosts


def eval_sums(eval_step, params, batches) -> dict:
  """{nll_sum, correct, tokens, ...}: the eval step's sums over finite `batches` (no label smoothing), as floats
  (every key it returns: with answer weights also `examples` and `exact`)."""
  totals = {"nll_sum": 0.0, "correct": 0.0, "tokens": 0.0}
  for batch in batches:
    sums = eval_step(params, batch)
    for key, value in sums.items():
      totals[key] = totals.get(key, 0.0) + float(value)
  return totals


def token_metrics(totals: dict) -> dict:
  """Token-level NLL (`loss`, nats per token), accuracy and perplexity from `eval_sums`."""
  tokens = max(totals["tokens"], 1.0)
  loss = totals["nll_sum"] / tokens
  return {"loss": loss, "accuracy": totals["correct"] / tokens, "perplexity": math.exp(min(loss, 50.0))}


def bits_per_byte(nll_sum: float, num_bytes: int) -> float:
  """Bits per UTF-8 byte of a split from the sum of its token NLLs in nats: nll_sum / ln 2 / bytes."""
  return nll_sum / math.log(2) / num_bytes


def kept_value(name: str, metrics: dict, model=None, host_params=None) -> float:
  """The value of kept metric `name` (`KEPT_METRICS`) from an evaluation's valid `metrics`: `valid_<key>` is
  `metrics[key]`. A task whose kept metrics need nothing more than its valid metrics takes this as its `kept_value`
  (the model and a function giving the parameters on the host serve a task that decodes)."""
  del model, host_params
  return metrics[name.removeprefix("valid_")]
