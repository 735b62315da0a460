"""Encoder-decoder translation (`model.architecture="transformer"`): pairs; eval loss, accuracy and perplexity on
the valid split; test BLEU, decoded with `config.decode` and scored with sacreBLEU."""

from __future__ import annotations

import time

import jax

from jformer import data
from jformer.decode.translator import make_translator
from jformer.models import Transformer
from jformer.parallel import say
from jformer.tasks import bleu
from jformer.tasks.metrics import eval_sums, kept_value, per_host, token_metrics
from jformer.tasks.registry import register


@register("transformer", model=Transformer, pairs=True)
class TranslationTask:
  """Encoder-decoder translation on pairs (`data.make_datasets`): teacher-forced eval metrics and decoded BLEU."""
  kept_metrics = ("valid_loss", "valid_bleu")  # `train.keep_best` may name these.

  def __init__(self, config, datasets: data.Datasets, tokenizer: data.Tokenizer):
    self.config, self.datasets, self.tokenizer = config, datasets, tokenizer
    self._translator = None  # made at the first BLEU, then given each call's parameters (compiled once).
    self.test_every = config.train.bleu_every

  @classmethod
  def build(cls, config, workdir, tokenizer: data.Tokenizer) -> TranslationTask:
    """The task with `config.data`'s pairs for this host (`data.make_datasets`)."""
    return cls(config, data.make_datasets(
        dataset=config.data.dataset, tokenizer=tokenizer, batch_size=per_host(config.data.batch_size, "batch_size"),
        max_length=config.data.max_length, packing=config.data.packing, long_examples=config.data.long_examples,
        seed=config.data.seed, eval_batch_size=per_host(config.data.eval_batch_size, "eval_batch_size"),
        batch_tokens=config.data.batch_tokens, subword_sampling=config.data.subword_sampling,
        subword_nbest=config.data.subword_nbest, row_multiple=jax.device_count() * config.train.grad_accumulation_steps,
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
    refusal = model.config.attention_refusal(decoding=True)
    if refusal:  # it trained and evaluated; decoding is what it cannot do.
      say(f"no BLEU: {refusal}")
      return {"bleu": None, "bleu_skipped": refusal}
    sources, references = self.datasets.raw_split(split)
    if config.train.bleu_examples >= 0:
      sources, references = sources[:config.train.bleu_examples], references[:config.train.bleu_examples]
    score, signature, seconds, hypotheses = self._bleu(model, params, sources, references)
    say(f"BLEU {score:.2f} on {len(sources)} {split} sentences ({config.decode.method} on {jax.device_count()} "
        f"devices, {seconds:.0f}s) | {signature}")
    for source, hypothesis, reference in list(zip(sources, hypotheses, references))[:3]:
      say(f"  src: {source}\n  hyp: {hypothesis}\n  ref: {reference}")
    return {"bleu": score, "sacrebleu_signature": signature, "bleu_examples": len(sources),
            "decode_seconds": seconds}

  def valid_bleu(self, model, params) -> float:
    """BLEU of `train.valid_bleu_examples` sentences of the valid split, evenly spaced over it (the same ones at
    every call; all of them when the split has fewer), decoded as the test is (`config.decode`)."""
    sources, references = self.datasets.raw_split("valid")
    count = min(self.config.train.valid_bleu_examples, len(sources))
    chosen = sorted({round(i * (len(sources) - 1) / max(count - 1, 1)) for i in range(count)})
    return self._bleu(model, params, [sources[i] for i in chosen], [references[i] for i in chosen])[0]

  def kept_value(self, name: str, metrics: dict, model, host_params) -> float:
    """The value of kept metric `name` (`kept_metrics`) at an evaluation whose valid `metrics` are given;
    `host_params()`: the parameters to decode with."""
    return self.valid_bleu(model, host_params()) if name == "valid_bleu" else kept_value(name, metrics)

  def _bleu(self, model, params, sources, references) -> tuple[float, str, float, list[str]]:
    """(BLEU, sacreBLEU signature, seconds, hypotheses) of `sources` decoded with `config.decode`."""
    start = time.perf_counter()
    if self._translator is None or self._translator.model is not model:
      self._translator = make_translator(self.config, model, params, self.tokenizer)
    else:
      self._translator.use_params(params)
    hypotheses = self._translator(sources, rng=jax.random.PRNGKey(self.config.train.seed))
    score, signature = bleu.corpus_bleu(hypotheses, references)
    return score, signature, time.perf_counter() - start, hypotheses

  def final_results(self, model, params, eval_step) -> dict:
    """Test BLEU of the final (or averaged) parameters."""
    del eval_step  # the run's last evaluation already scored the valid split.
    return self.test(model, params)

  @staticmethod
  def final_scalars(results: dict) -> dict:
    return {} if results["bleu"] is None else {"bleu": results["bleu"]}

  @staticmethod
  def summary(results: dict) -> str:
    return "no BLEU (the variant cannot decode)" if results["bleu"] is None else f"BLEU {results['bleu']:.2f}"

  def score_split(self, model, params, eval_step, split: str) -> dict:
    """`jformer evaluate`: loss, accuracy, perplexity and BLEU of `split`."""
    return {**self.evaluate(eval_step, params, split), **self.test(model, params, split)}
