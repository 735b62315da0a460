"""The task a run trains for, chosen by `config.model.architecture`: its data, what it evaluates, what it reports.

    "transformer" -> TranslationTask    pairs; eval loss, accuracy, perplexity; test BLEU (decoded with config.decode)
    "lm"          -> LanguageModelTask  documents; eval loss, accuracy, perplexity, bits per byte; the xz baseline;
                                        test bits per byte at data.max_length and at each train.eval_lengths

The train loop (`jformer.train.loop`) and `jformer evaluate` (`jformer.train.evaluation`) only talk to a task:

    task = make_task(config, workdir, tokenizer)       # task.datasets: this host's (.train, .describe(max_length))
    metrics = task.evaluate(eval_step, params, "valid")  # {name: float}, logged as eval/<name>
    task.eval_line(metrics)                            # 'loss 2.3456 | accuracy 0.512 | perplexity 10.44'
    task.test_every, task.test(model, params)          # periodic test during training (BLEU; none for an LM)
    task.final_results(model, params, eval_step)       # results.json entries of a finished run
    task.final_scalars(results)                        # of those, the TensorBoard test/ scalars
    task.summary(results)                              # 'BLEU 12.34' / 'eval bits per byte 1.2 (xz -9: 1.9), ...'
    task.score_split(model, params, eval_step, split)  # everything `jformer evaluate` reports for a split

`eval_step(params, batch) -> {nll_sum, correct, tokens}` sums over the (global) batch (`jformer.train.step`).
"""

from __future__ import annotations

import math
import time

import jax
from absl import logging

from jformer import data
from jformer.data.baselines import xz_bits_per_byte
from jformer.decode.translator import make_translator
from jformer.train import bleu
from jformer.train.progress import say


def per_host(total: int, what: str) -> int:
  """`total` rows (all hosts) -> rows of this host; refuses a total the hosts do not divide."""
  hosts = jax.process_count()
  if total % hosts:
    raise ValueError(f"{what}={total} is not divisible by the {hosts} hosts")
  return total // hosts


def eval_sums(eval_step, params, batches) -> dict:
  """{nll_sum, correct, tokens}: the eval step's sums over finite `batches` (no label smoothing), as floats."""
  totals = {"nll_sum": 0.0, "correct": 0.0, "tokens": 0.0}
  for batch in batches:
    sums = eval_step(params, batch)
    for key in totals:
      totals[key] += float(sums[key])
  return totals


def token_metrics(totals: dict) -> dict:
  """Token-level NLL (`loss`, nats per token), accuracy and perplexity from `eval_sums`."""
  tokens = max(totals["tokens"], 1.0)
  loss = totals["nll_sum"] / tokens
  return {"loss": loss, "accuracy": totals["correct"] / tokens, "perplexity": math.exp(min(loss, 50.0))}


def bits_per_byte(nll_sum: float, num_bytes: int) -> float:
  """Bits per UTF-8 byte of a split from the sum of its token NLLs in nats: nll_sum / ln 2 / bytes."""
  return nll_sum / math.log(2) / num_bytes


class TranslationTask:
  """Encoder-decoder translation on pairs (`data.make_datasets`): teacher-forced eval metrics and decoded BLEU."""

  def __init__(self, config, datasets: data.Datasets, tokenizer: data.Tokenizer):
    self.config, self.datasets, self.tokenizer = config, datasets, tokenizer
    self.test_every = config.train.bleu_every

  @classmethod
  def build(cls, config, workdir, tokenizer: data.Tokenizer) -> TranslationTask:
    """The task with `config.data`'s pairs for this host (`data.make_datasets`)."""
    return cls(config, data.make_datasets(
        dataset=config.data.dataset, tokenizer=tokenizer, batch_size=per_host(config.data.batch_size, "batch_size"),
        max_length=config.data.max_length, packing=config.data.packing, long_examples=config.data.long_examples,
        seed=config.data.seed, eval_batch_size=per_host(config.data.eval_batch_size, "eval_batch_size"),
        batch_tokens=config.data.batch_tokens,
        row_multiple=jax.device_count() * config.train.grad_accumulation_steps,
        **data.source_args(config, workdir)), tokenizer)

  def evaluate(self, eval_step, params, split: str = "valid") -> dict:
    """Loss, accuracy and perplexity of `split` (its sources and targets cut to data.max_length)."""
    return token_metrics(eval_sums(eval_step, params, self.datasets.eval_batches(split)))

  @staticmethod
  def eval_line(metrics: dict) -> str:
    return f"loss {metrics['loss']:.4f} | accuracy {metrics['accuracy']:.3f} | perplexity {metrics['perplexity']:.2f}"

  def test(self, model, params, split: str = "test") -> dict:
    """Decodes `split` (or its first `train.bleu_examples`) and scores it with sacreBLEU.

    Every device of every host decodes its share of each batch (`jformer.decode.distributed`) and every host gets
    all translations back; so every host must hold the same split.
    """
    config = self.config
    sources, references = self.datasets.raw_split(split)
    if config.train.bleu_examples >= 0:
      sources, references = sources[:config.train.bleu_examples], references[:config.train.bleu_examples]
    start = time.perf_counter()
    hypotheses = make_translator(config, model, params, self.tokenizer)(sources,
                                                                         rng=jax.random.PRNGKey(config.train.seed))
    score, signature = bleu.corpus_bleu(hypotheses, references)
    seconds = time.perf_counter() - start
    say(f"BLEU {score:.2f} on {len(sources)} {split} sentences ({config.decode.method} on {jax.device_count()} "
        f"devices, {seconds:.0f}s) | {signature}")
    for source, hypothesis, reference in list(zip(sources, hypotheses, references))[:3]:
      say(f"  src: {source}\n  hyp: {hypothesis}\n  ref: {reference}")
    return {"bleu": score, "sacrebleu_signature": signature, "bleu_examples": len(sources),
            "decode_seconds": seconds}

  def final_results(self, model, params, eval_step) -> dict:
    """Test BLEU of the final (or averaged) parameters."""
    del eval_step  # the run's last evaluation already scored the valid split.
    return self.test(model, params)

  @staticmethod
  def final_scalars(results: dict) -> dict:
    return {"bleu": results["bleu"]}

  @staticmethod
  def summary(results: dict) -> str:
    return f"BLEU {results['bleu']:.2f}"

  def score_split(self, model, params, eval_step, split: str) -> dict:
    """`jformer evaluate`: loss, accuracy, perplexity and BLEU of `split`."""
    return {**self.evaluate(eval_step, params, split), **self.test(model, params, split)}


class LanguageModelTask:
  """Decoder-only language modelling on documents (`data.make_lm_datasets`): bits per byte, no decoding.

  A split's bits per byte is the sum of its token NLLs (every token of every document once, EOS included) in bits
  over its UTF-8 bytes (`split_bytes`: each document + 1 for its end). The xz baseline of the valid split given the
  train split (`jformer.data.baselines.xz_bits_per_byte`) is computed on the same bytes.
  """
  test_every = 0  # nothing to decode during training.

  def __init__(self, config, datasets):
    """`datasets`: an `LMDatasets` (`data.make_lm_datasets`) or anything with its `eval_batches`, `split_bytes`
    and `documents`."""
    self.config, self.datasets = config, datasets

  @classmethod
  def build(cls, config, workdir, tokenizer: data.Tokenizer) -> LanguageModelTask:
    """The task with `config.data`'s documents for this host (`data.make_lm_datasets`)."""
    where = data.source_args(config, workdir)
    return cls(config, data.make_lm_datasets(
        dataset=config.data.dataset, tokenizer=tokenizer, batch_size=per_host(config.data.batch_size, "batch_size"),
        max_length=config.data.max_length, pack=config.data.pack, seed=config.data.seed,
        eval_batch_size=per_host(config.data.eval_batch_size, "eval_batch_size"), path=where["path"],
        data_dir=where["data_dir"]))

  def evaluate(self, eval_step, params, split: str = "valid", max_length: int | None = None) -> dict:
    """Loss, accuracy, perplexity and bits per byte of `split`, read in pieces of at most `max_length` tokens
    (default data.max_length), each from position 0."""
    sums = eval_sums(eval_step, params, self.datasets.eval_batches(split, max_length=max_length))
    return {**token_metrics(sums), "bits_per_byte": bits_per_byte(sums["nll_sum"], self.datasets.split_bytes(split))}

  @staticmethod
  def eval_line(metrics: dict) -> str:
    return (f"loss {metrics['loss']:.4f} | accuracy {metrics['accuracy']:.3f} | perplexity "
            f"{metrics['perplexity']:.2f} | bits per byte {metrics['bits_per_byte']:.4f}")

  def xz_baseline(self) -> float:
    """Bits per byte of `xz -9` on the valid split given the train split (seconds on a few MB)."""
    start = time.perf_counter()
    value = xz_bits_per_byte(self.datasets.documents("train"), self.datasets.documents("valid"))
    logging.info("xz baseline %.4f bits per byte (%.1fs)", value, time.perf_counter() - start)
    return value

  def final_results(self, model, params, eval_step) -> dict:
    """The xz baseline of the valid split (printed beside the run's last valid bits per byte, which the loop's
    last evaluation wrote into `eval_bits_per_byte`), and test bits per byte at data.max_length and at each
    `train.eval_lengths` (their own line each)."""
    del model
    results = {"xz_bits_per_byte": self.xz_baseline()}
    results["test_bits_per_byte"] = self.evaluate(eval_step, params, "test")["bits_per_byte"]
    results["test_bits_per_byte_at"] = {
        str(length): self.evaluate(eval_step, params, "test", max_length=length)["bits_per_byte"]
        for length in self.config.train.eval_lengths or (self.config.data.max_length,)}
    say("test bits per byte by context: " + " | ".join(f"{length}: {value:.4f}" for length, value in
                                                        results["test_bits_per_byte_at"].items()))
    return results

  @staticmethod
  def final_scalars(results: dict) -> dict:
    return {"bits_per_byte": results["test_bits_per_byte"]}

  @staticmethod
  def summary(results: dict) -> str:
    eval_line = (f"eval bits per byte {results['eval_bits_per_byte']:.4f} (xz -9: {results['xz_bits_per_byte']:.4f})"
                 if "eval_bits_per_byte" in results else f"xz -9 {results['xz_bits_per_byte']:.4f} bits per byte")
    return f"{eval_line}, test bits per byte {results['test_bits_per_byte']:.4f}"

  def score_split(self, model, params, eval_step, split: str) -> dict:
    """`jformer evaluate`: loss, accuracy, perplexity and bits per byte of `split` at data.max_length (and for the
    valid split the xz baseline)."""
    del model
    metrics = self.evaluate(eval_step, params, split)
    return {**metrics, "xz_bits_per_byte": self.xz_baseline()} if split == "valid" else metrics


TASKS = {"transformer": TranslationTask, "lm": LanguageModelTask}


def make_task(config, workdir, tokenizer):
  """The task of `config.model.architecture`, with its datasets built for this host."""
  if config.model.architecture not in TASKS:
    raise ValueError(f"model.architecture='{config.model.architecture}' has no task; known: {sorted(TASKS)}")
  return TASKS[config.model.architecture].build(config, workdir, tokenizer)
