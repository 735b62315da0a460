"""`train_and_evaluate(config, workdir)`: init -> restore -> steps -> eval -> BLEU -> checkpoint.

Workdir layout: config.json (the resolved config), vocab/ (SentencePiece), tfds/ (prepared data),
checkpoints/ (Orbax: state + data iterator), tensorboard/, results.json, averaged/ (averaged parameters).
Running it again on the same workdir resumes from the latest checkpoint; SIGTERM saves and exits cleanly.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from jformer import checkpoint, data, models, parallel
from jformer import config as config_lib
from jformer.decode.translator import make_translator
from jformer.train import bleu, optim
from jformer.train.progress import Progress, format_duration, write_json
from jformer.train.runner import make_runner
from jformer.train.step import FINITE_CHECKS


def say(message: str):
  """Prints on process 0 only."""
  if parallel.is_chief():
    print(message, flush=True)


class NonFiniteUpdateError(FloatingPointError):
  """A step's loss, gradients or updated parameters were NaN or Inf once more than `train.skip_nonfinite_updates`
  allows; the run stops and keeps the last good checkpoint."""


def check_update(step: int, metrics: dict, allowed: int, checkpointer) -> int:
  """Takes the train step's finiteness flags out of `metrics` and returns the run's skipped updates so far.

  The step never applies a non-finite update (it keeps the old state), so every saved state is finite. Such a
  skipped update is reported while at most `allowed` were skipped; the next one stops the run before anything
  is saved, naming the step, what was non-finite and the last checkpoint.
  """
  finite, skipped = metrics.pop("finite"), int(metrics.pop("skipped_updates"))
  if finite.all():
    return skipped
  bad = [name for name, ok in zip(FINITE_CHECKS, finite) if not ok]
  what = f"{', '.join(bad[:-1])} and {bad[-1]}" if len(bad) > 1 else bad[0]
  if skipped <= allowed:
    say(f"step {step}: non-finite {what}, update skipped ({skipped} of {allowed} allowed)")
    return skipped
  last = checkpointer.latest_step()
  kept = (f"The last good checkpoint is step {last} in {checkpointer.directory}." if last is not None
          else "No checkpoint was saved before it.")
  after = f" after {allowed} skipped updates" if allowed else ""
  raise NonFiniteUpdateError(f"step {step}: non-finite {what}; stopping{after} "
                             f"(train.skip_nonfinite_updates={allowed}). {kept}")


def per_host(total: int, what: str) -> int:
  hosts = jax.process_count()
  if total % hosts:
    raise ValueError(f"{what}={total} is not divisible by the {hosts} hosts")
  return total // hosts


def write_config(config, workdir: str):
  """Writes the resolved config; on resume, refuses a different model (its parameters would not fit)."""
  path = os.path.join(workdir, "config.json")
  resolved = json.loads(config.to_json_best_effort())
  if os.path.exists(path):
    previous = json.loads(config_lib.load_run(workdir).to_json_best_effort())
    if previous["model"] != resolved["model"]:
      changed = sorted(k for k in resolved["model"] if previous["model"].get(k) != resolved["model"][k])
      raise ValueError(f"{workdir} holds a run with another model config (model.{', model.'.join(changed)} "
                       f"differ from {path}); use a new --workdir")
    changed = sorted(k for k in resolved if previous.get(k) != resolved[k])
    if changed:
      logging.warning("Resuming with changed config sections %s (previous config in %s).", changed, path)
  write_json(path, resolved)


def evaluate(eval_step, params, batches) -> dict:
  """Token-level NLL, accuracy and perplexity over finite `batches` (no label smoothing)."""
  totals = {"nll_sum": 0.0, "correct": 0.0, "tokens": 0.0}
  for batch in batches:
    sums = eval_step(params, batch)
    for key in totals:
      totals[key] += float(sums[key])
  tokens = max(totals["tokens"], 1.0)
  loss = totals["nll_sum"] / tokens
  return {"loss": loss, "accuracy": totals["correct"] / tokens, "perplexity": math.exp(min(loss, 50.0))}


def test_bleu(config, model, params, tokenizer, datasets) -> dict:
  """Decodes the test split (or its first `train.bleu_examples`) and scores it with sacreBLEU."""
  sources, references = datasets.raw_split("test")
  if config.train.bleu_examples >= 0:
    sources, references = sources[:config.train.bleu_examples], references[:config.train.bleu_examples]
  start = time.perf_counter()
  hypotheses = make_translator(config, model, params, tokenizer)(sources, rng=jax.random.PRNGKey(config.train.seed))
  score, signature = bleu.corpus_bleu(hypotheses, references)
  seconds = time.perf_counter() - start
  say(f"BLEU {score:.2f} on {len(sources)} test sentences ({config.decode.method}, {seconds:.0f}s) | {signature}")
  for source, hypothesis, reference in list(zip(sources, hypotheses, references))[:3]:
    say(f"  src: {source}\n  hyp: {hypothesis}\n  ref: {reference}")
  return {"bleu": score, "sacrebleu_signature": signature, "bleu_examples": len(sources),
          "decode_seconds": seconds}


class _Preemption:
  """Turns SIGTERM into a flag the loop checks after each step (then: save, exit cleanly)."""

  def __init__(self):
    self.requested = False
    self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame):
    logging.warning("SIGTERM received: saving a checkpoint after this step, then exiting.")
    self.requested = True

  def restore(self):
    signal.signal(signal.SIGTERM, self._previous)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains `config` in `workdir` (resuming if it holds checkpoints) and returns the final results."""
  workdir = os.path.abspath(workdir)
  os.makedirs(workdir, exist_ok=True)
  write_config(config, workdir)
  tokenizer = data.load_tokenizer(config, workdir)
  if tokenizer.vocab_size != config.model.vocab_size:
    raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but model.vocab_size={config.model.vocab_size}")
  datasets = data.make_datasets(
      dataset=config.data.dataset, tokenizer=tokenizer, batch_size=per_host(config.data.batch_size, "batch_size"),
      max_length=config.data.max_length, packing=config.data.packing, long_examples=config.data.long_examples,
      seed=config.data.seed, eval_batch_size=per_host(config.data.eval_batch_size, "eval_batch_size"),
      **data.source_args(config, workdir))
  say(f"data: {len(datasets.train_pairs):,} training pairs ({datasets.train_pairs.num_tokens():,} tokens), "
      f"{datasets.train_pairs.dropped:,} dropped as longer than {config.data.max_length} tokens")

  model = models.build(config)
  tx, schedule = optim.build_optimizer(config.optimizer, config.model.d_model)
  example = {k: jnp.zeros((1, config.data.max_length), jnp.int32) for k in ("inputs", "targets")}
  runner = make_runner(config, model, tx, schedule, example)
  state = runner.init_state(jax.random.PRNGKey(config.train.seed))
  num_params = sum(x.size for x in jax.tree.leaves(runner.checkpoint_view(state).params))
  say(f"model: {num_params / 1e6:.2f}M parameters; {runner.describe(state)}")

  checkpointer = checkpoint.Checkpointer(checkpoint.checkpoints_dir(workdir),
                                         max_to_keep=config.train.keep_checkpoints,
                                         save_interval_steps=config.train.checkpoint_every)
  if checkpointer.latest_step() is not None:
    state = runner.from_checkpoint(checkpointer.restore(runner.abstract_state(), datasets.train))
    say(f"resumed from step {checkpointer.latest_step()} ({checkpointer.directory})")
  start_step = int(runner.checkpoint_view(state).step)

  progress = Progress(workdir, config.train.steps, start_step)
  preemption = _Preemption()
  results = {"step": start_step, "skipped_updates": int(runner.checkpoint_view(state).skipped_updates)}
  step = start_step
  try:
    for step in range(start_step + 1, config.train.steps + 1):
      batch = next(datasets.train)
      input_tokens = float(np.count_nonzero(batch["inputs"]) + np.count_nonzero(batch["targets"]))
      if step == start_step + 1:  # compiles the step (its first call reuses it) and reads its temporary memory.
        temp_bytes = runner.step_temp_bytes(state, batch)
        if temp_bytes is not None:
          results["step_temp_mib"] = temp_bytes / 2**20
          say(f"train step: {results['step_temp_mib']:,.1f} MiB of temporary memory per device (compiled)")
      state, metrics = runner.train_step(state, batch)
      results["skipped_updates"] = check_update(step, metrics, config.train.skip_nonfinite_updates, checkpointer)
      progress.add(metrics, input_tokens, timed=step > start_step + 1)  # the first step includes compilation.
      if step % config.train.log_every == 0 or step == config.train.steps:
        averages = progress.report(step)
        results.update(step=step, train_loss=averages["loss"], tokens_per_second=averages["tokens_per_second"])
      if step % config.train.eval_every == 0 or step == config.train.steps:
        with progress.paused():
          results.update({f"eval_{k}": v for k, v in
                          evaluate(runner.eval_step, state.params, datasets.eval_batches("valid")).items()})
        say(f"eval step {step}: loss {results['eval_loss']:.4f} | accuracy {results['eval_accuracy']:.3f} | "
            f"perplexity {results['eval_perplexity']:.2f}")
        progress.scalars(step, {k[5:]: results[k] for k in ("eval_loss", "eval_accuracy", "eval_perplexity")},
                         prefix="eval/")
      if config.train.bleu_every and step % config.train.bleu_every == 0 and step != config.train.steps:
        with progress.paused():
          progress.scalars(step, test_bleu(config, model, runner.host_params(state), tokenizer, datasets),
                           prefix="test/")
      with progress.paused():
        checkpointer.save(step, runner.checkpoint_view(state), datasets.train,
                          force=step == config.train.steps or preemption.requested)
      if preemption.requested:
        checkpointer.wait()
        say(f"preempted: saved step {step} to {checkpointer.directory}; rerun the same command to resume")
        results["preempted"] = True
        return results
    checkpointer.wait()
    results["step"] = step
    params = runner.host_params(state)
    if config.train.average_checkpoints > 1:
      params, steps = checkpoint.average_params(checkpointer.directory, last=config.train.average_checkpoints)
      checkpoint.save_params(checkpoint.averaged_dir(workdir), params, overwrite=True)
      results["averaged_steps"] = [int(s) for s in steps]
    results.update(test_bleu(config, model, params, tokenizer, datasets))
    results["train_seconds"] = progress.train_seconds + 0.0
    results["tokens_per_second"] = progress.train_tokens / max(progress.train_seconds, 1e-9)
    progress.scalars(results["step"], {"bleu": results["bleu"]}, prefix="test/")
    write_json(os.path.join(workdir, "results.json"), results)
    say(f"done: step {results['step']}, BLEU {results['bleu']:.2f}, eval loss {results.get('eval_loss', 0):.4f}, "
        f"{results['tokens_per_second']:,.0f} tokens/s over {format_duration(results['train_seconds'])} of "
        f"training; results in {os.path.join(workdir, 'results.json')}")
    return results
  finally:
    preemption.restore()
    checkpointer.close()
    progress.close()
