"""Decoder-only language modelling (`model.architecture="lm"`): documents (of one dataset, or a `data.mixture`'s);
eval loss, accuracy, perplexity and bits per byte (and each mixture source's); the xz baseline; test bits per byte
at data.max_length and at each train.eval_lengths."""

from __future__ import annotations

import time

from absl import logging

from jformer import data
from jformer.data.baselines import xz_bits_per_byte
from jformer.models import LanguageModel
from jformer.parallel import say
from jformer.tasks.metrics import bits_per_byte, eval_sums, kept_value, per_host, token_metrics
from jformer.tasks.registry import register


@register("lm", model=LanguageModel, pairs=False)
class LanguageModelTask:
  """Decoder-only language modelling on documents (`data.make_lm_datasets`): bits per byte, no decoding.

  A split's bits per byte is the sum of its token NLLs (every token of every document once, EOS included) in bits
  over its UTF-8 bytes (`split_bytes`: each document + 1 for its end). The xz baseline of the valid split given the
  train split (`jformer.data.baselines.xz_bits_per_byte`) is computed on the same bytes. A mixture's split is every
  source's together; each source's bits per byte is reported too (`bits_per_byte/<source>`).
  """
  test_every = 0  # nothing to decode during training.
  kept_metrics = ("valid_loss", "valid_bits_per_byte")  # `train.keep_best` may name these.

  def __init__(self, config, datasets):
    """`datasets`: an `LMDatasets` (`data.make_lm_datasets`) or anything with its `eval_batches`, `split_bytes`
    and `documents`."""
    self.config, self.datasets = config, datasets

  @classmethod
  def build(cls, config, workdir, tokenizer: data.Tokenizer) -> LanguageModelTask:
    """The task with `config.data`'s documents for this host (`data.make_lm_datasets`)."""
    where = data.source_args(config, workdir)
    rows = dict(tokenizer=tokenizer, batch_size=per_host(config.data.batch_size, "batch_size"),
                max_length=config.data.max_length, pack=config.data.pack, seed=config.data.seed,
                eval_batch_size=per_host(config.data.eval_batch_size, "eval_batch_size"), data_dir=where["data_dir"])
    mixture = data.mixture_sources(config)
    if mixture:
      return cls(config, data.make_mixture_datasets(mixture, **rows))
    return cls(config, data.make_lm_datasets(dataset=config.data.dataset, path=where["path"], **rows))

  def evaluate(self, eval_step, params, split: str = "valid", max_length: int | None = None) -> dict:
    """Loss, accuracy, perplexity and bits per byte of `split`, read in pieces of at most `max_length` tokens
    (default data.max_length), each from position 0; with a mixture, also each source's `bits_per_byte/<source>`
    (the source's NLL over its bytes; the split's: all sources' NLL over all their bytes)."""
    sources = getattr(self.datasets, "sources", {})
    if not sources:
      sums = eval_sums(eval_step, params, self.datasets.eval_batches(split, max_length=max_length))
      return {**token_metrics(sums), "bits_per_byte": bits_per_byte(sums["nll_sum"],
                                                                    self.datasets.split_bytes(split))}
    each = {name: eval_sums(eval_step, params, part.eval_batches(split, max_length)) for name, part in sources.items()}
    sums = {key: sum(source_sums[key] for source_sums in each.values()) for key in next(iter(each.values()))}
    return {**token_metrics(sums), "bits_per_byte": bits_per_byte(sums["nll_sum"], self.datasets.split_bytes(split)),
            **{f"bits_per_byte/{name}": bits_per_byte(each[name]["nll_sum"], part.split_bytes(split))
               for name, part in sources.items()}}

  @staticmethod
  def eval_line(metrics: dict) -> str:
    each = ", ".join(f"{key.partition('/')[2]} {value:.4f}" for key, value in metrics.items()
                     if key.startswith("bits_per_byte/"))
    return (f"loss {metrics['loss']:.4f} | accuracy {metrics['accuracy']:.3f} | perplexity "
            f"{metrics['perplexity']:.2f} | bits per byte {metrics['bits_per_byte']:.4f}"
            + (f" ({each})" if each else ""))

  kept_value = staticmethod(kept_value)

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
