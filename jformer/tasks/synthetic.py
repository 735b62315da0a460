"""Synthetic recall tasks (`model.architecture="synthetic"`): the decoder-only language model on a synthetic
dataset ("mqar", "induction", "selective_copy", "listops"), scored on the answer positions only.

The loss and the token accuracy weigh each target token by the batch's `targets_weights`, 1 at the answers (MQAR:
the queried keys' values; induction: the token after the second trigger; selective copy: the copied tokens;
ListOps: the value, at the LM's position after the expression), 0 elsewhere. Metrics of a split:
  loss          nats per answer token.
  accuracy      answer tokens predicted right (argmax) / answer tokens.
  exact_match   examples whose every answer token is right / examples.
"""

from __future__ import annotations

from jformer import data
from jformer.models import LanguageModel
from jformer.parallel import say
from jformer.tasks.metrics import eval_sums, kept_value, per_host, token_metrics
from jformer.tasks.registry import register


def answer_metrics(sums: dict) -> dict:
  """Loss, accuracy, perplexity (of the answer tokens) and exact_match from `eval_sums` of answer-weighted
  batches."""
  return {**token_metrics(sums), "exact_match": sums["exact"] / max(sums["examples"], 1.0)}


@register("synthetic", model=LanguageModel, pairs=False)
class SyntheticTask:
  """A synthetic task for a decoder-only model: loss, answer accuracy and exact match on generated examples."""
  test_every = 0  # nothing to decode during training.
  kept_metrics = ("valid_loss",)  # `train.keep_best` may name these.

  def __init__(self, config, datasets: data.SyntheticDatasets):
    self.config, self.datasets = config, datasets

  @classmethod
  def build(cls, config, workdir, tokenizer) -> SyntheticTask:
    """The task with `config.data`'s synthetic rows for this host (`data.make_synthetic_datasets`)."""
    del workdir, tokenizer  # generated from the seed; the token ids are the task's own.
    return cls(config, data.make_synthetic_datasets(
        dataset=config.data.dataset, options=dict(config.data.dataset_options),
        batch_size=per_host(config.data.batch_size, "batch_size"), seed=config.data.seed,
        eval_batch_size=per_host(config.data.eval_batch_size, "eval_batch_size")))

  def evaluate(self, eval_step, params, split: str = "valid") -> dict:
    """Loss, accuracy, perplexity and exact match of `split`'s answers."""
    return answer_metrics(eval_sums(eval_step, params, self.datasets.eval_batches(split)))

  @staticmethod
  def eval_line(metrics: dict) -> str:
    return (f"answer loss {metrics['loss']:.4f} | answer accuracy {metrics['accuracy']:.3f} | exact match "
            f"{metrics['exact_match']:.3f}")

  kept_value = staticmethod(kept_value)

  def final_results(self, model, params, eval_step) -> dict:
    """The test split's answer loss, accuracy and exact match."""
    del model
    metrics = self.evaluate(eval_step, params, "test")
    say(f"test: {self.eval_line(metrics)}")
    return {f"test_{key}": value for key, value in metrics.items()}

  @staticmethod
  def final_scalars(results: dict) -> dict:
    return {"accuracy": results["test_accuracy"], "exact_match": results["test_exact_match"]}

  @staticmethod
  def summary(results: dict) -> str:
    return (f"test answer accuracy {results['test_accuracy']:.4f}, exact match "
            f"{results['test_exact_match']:.4f}")

  def score_split(self, model, params, eval_step, split: str) -> dict:
    """`jformer evaluate`: the answer loss, accuracy, perplexity and exact match of `split`."""
    del model
    return self.evaluate(eval_step, params, split)
