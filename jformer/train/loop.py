"""`train_and_evaluate(config, workdir)`: init -> restore -> steps -> eval -> BLEU -> checkpoint.

Workdir layout: config.json (the resolved config), vocab/ (SentencePiece), tfds/ (prepared data),
checkpoints/ (Orbax: state + data iterator), tensorboard/, results.json, averaged/ (averaged parameters).
Running it again on the same workdir resumes from the latest checkpoint. SIGTERM saves a step all hosts agree on
(or, before the first step, saves nothing) and exits with status 0 (`jformer.train.preemption`).
The workdir is a local folder or any `etils.epath` path (gs://bucket/run): every file goes through epath.

The step loop never waits for the device: the step's metrics are summed on device and read every
`train.log_every` steps, and before every evaluation, BLEU and checkpoint, where non-finite updates are checked.
"""

from __future__ import annotations

import json
import math
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from etils import epath

from jformer import checkpoint, data, models, parallel, paths
from jformer import config as config_lib
from jformer.decode.translator import make_translator
from jformer.train import bleu, optim, workdir_lock
from jformer.train.preemption import Preempted, Preemption
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


def _non_finite(finite) -> str:
  """What a step's `FINITE_CHECKS` flags say was not finite, e.g. 'gradients and updated parameters'."""
  bad = [name for name, ok in zip(FINITE_CHECKS, finite) if not ok]
  return f"{', '.join(bad[:-1])} and {bad[-1]}" if len(bad) > 1 else bad[0]


def check_update(totals: dict, first_step: int, last_step: int, allowed: int, checkpointer) -> int:
  """Checks the train-step totals of steps `first_step`..`last_step`, read from the device
  (`jformer.train.step.new_totals`), and returns the run's skipped updates so far.

  The step never applies a non-finite update (it keeps the old state), so every saved state is finite. Skipped
  updates are reported (how many, and the first) while at most `allowed` were skipped in the run; the first step
  beyond that stops the run, naming that step, what was non-finite and the last checkpoint. The loop checks before
  every save, so no checkpoint is written after that step.
  """
  skipped = int(totals["skipped_updates"])
  if totals["stop_step"] >= 0:
    last = checkpointer.latest_step()
    kept = (f"The last good checkpoint is step {last} in {checkpointer.directory}." if last is not None
            else "No checkpoint was saved before it.")
    after = f" after {allowed} skipped updates" if allowed else ""
    raise NonFiniteUpdateError(f"step {int(totals['stop_step'])}: non-finite {_non_finite(totals['stop_finite'])}; "
                               f"stopping{after} (train.skip_nonfinite_updates={allowed}). {kept}")
  count = int(totals["skipped"])
  if count:
    say(f"steps {first_step}-{last_step}: {count} non-finite update{'s' if count > 1 else ''} skipped, the first at "
        f"step {int(totals['first_bad_step'])} (non-finite {_non_finite(totals['first_bad_finite'])}); "
        f"{skipped} of {allowed} allowed")
  return skipped


def per_host(total: int, what: str) -> int:
  hosts = jax.process_count()
  if total % hosts:
    raise ValueError(f"{what}={total} is not divisible by the {hosts} hosts")
  return total // hosts


def check_resume(config, workdir: epath.PathLike) -> None:
  """On a workdir that holds a run (its config.json): refuses a change of the keys that define the run
  (`config.RUN_KEYS`: model shape, vocabulary, data), naming them, and warns naming the other keys that changed.
  Reads only, so a refused run leaves the workdir as it was."""
  path = epath.Path(workdir) / "config.json"
  if not path.exists():
    return
  changed = config_lib.check_same_run(config_lib.load_run(workdir), config, f"{workdir} holds a run that",
                                      f"change them back (see {path}) or train in a new --workdir")
  if changed:
    logging.warning("Resuming with changed config keys: %s (previous config in %s).",
                    ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changed.items()), path)


def write_config(config, workdir: epath.PathLike) -> None:
  """Writes the resolved config to `<workdir>/config.json` (after `check_resume`)."""
  write_json(epath.Path(workdir) / "config.json", json.loads(config.to_json_best_effort()))


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
  """Decodes the test split (or its first `train.bleu_examples`) and scores it with sacreBLEU.

  Every device of every host decodes its share of each batch (`jformer.decode.distributed`) and every host gets
  all translations back; so every host must hold the same test split.
  """
  sources, references = datasets.raw_split("test")
  if config.train.bleu_examples >= 0:
    sources, references = sources[:config.train.bleu_examples], references[:config.train.bleu_examples]
  start = time.perf_counter()
  hypotheses = make_translator(config, model, params, tokenizer)(sources, rng=jax.random.PRNGKey(config.train.seed))
  score, signature = bleu.corpus_bleu(hypotheses, references)
  seconds = time.perf_counter() - start
  say(f"BLEU {score:.2f} on {len(sources)} test sentences ({config.decode.method} on {jax.device_count()} devices, "
      f"{seconds:.0f}s) | {signature}")
  for source, hypothesis, reference in list(zip(sources, hypotheses, references))[:3]:
    say(f"  src: {source}\n  hyp: {hypothesis}\n  ref: {reference}")
  return {"bleu": score, "sacrebleu_signature": signature, "bleu_examples": len(sources),
          "decode_seconds": seconds}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: epath.PathLike) -> dict:
  """Trains `config` in `workdir` (resuming if it holds checkpoints) and returns the final results.

  On SIGTERM it returns early with `preempted=True` in the results (see `jformer.train.preemption`). A second job
  on the same workdir is refused while this one runs (`jformer.train.workdir_lock`).
  """
  workdir = paths.absolute(workdir)
  check_resume(config, workdir)  # a changed model, vocabulary or data: one line naming the keys, nothing written.
  data.check_run_inputs(config, workdir)  # bad data, vocabulary or workdir: one line, nothing written.
  workdir.mkdir(parents=True, exist_ok=True)
  with workdir_lock.hold(workdir), Preemption() as preemption:
    try:
      return _train_and_evaluate(config, workdir, preemption)
    except Preempted as stop:
      say(f"preempted {stop}: no step was trained since the last checkpoint, so none was saved; rerun the same "
          "command to resume")
      return {"preempted": True}


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: epath.PathLike, preemption: Preemption) -> dict:
  write_config(config, workdir)
  tokenizer = data.prepare(config, workdir)  # tfds data and vocabulary: process 0 first, then the others.
  if tokenizer.vocab_size != config.model.vocab_size:
    raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but model.vocab_size={config.model.vocab_size}")
  preemption.check("during the data preparation")
  datasets = data.make_datasets(
      dataset=config.data.dataset, tokenizer=tokenizer, batch_size=per_host(config.data.batch_size, "batch_size"),
      max_length=config.data.max_length, packing=config.data.packing, long_examples=config.data.long_examples,
      seed=config.data.seed, eval_batch_size=per_host(config.data.eval_batch_size, "eval_batch_size"),
      **data.source_args(config, workdir))
  say(datasets.describe(config.data.max_length))
  preemption.check("while reading the data")

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
  results = {"step": start_step, "skipped_updates": int(runner.checkpoint_view(state).skipped_updates)}
  totals, unread = runner.new_totals(), start_step + 1  # metrics of steps unread..step, summed on device.
  step = start_step
  try:
    preemption.start(start_step, checkpointer)
    for step in range(start_step + 1, config.train.steps + 1):
      batch = next(datasets.train)
      input_tokens = float(np.count_nonzero(batch["inputs"]) + np.count_nonzero(batch["targets"]))
      if step == start_step + 1:  # compiles the step (its first call reuses it) and reads its temporary memory.
        temp_bytes = runner.step_temp_bytes(state, batch)
        if temp_bytes is not None:
          results["step_temp_mib"] = temp_bytes / 2**20
          say(f"train step: {results['step_temp_mib']:,.1f} MiB of temporary memory per device (compiled)")
      state, metrics = runner.train_step(state, batch)
      totals = runner.add_to_totals(totals, metrics)
      progress.step(input_tokens, timed=step > start_step + 1)  # the first step includes compilation.
      preempted = preemption.reached(step, checkpointer)
      last = step == config.train.steps
      log = step % config.train.log_every == 0 or last
      evaluate_now = not preempted and (step % config.train.eval_every == 0 or last)
      bleu_now = not preempted and config.train.bleu_every and step % config.train.bleu_every == 0 and not last
      save = preempted or last or checkpointer.should_save(step)
      if log or evaluate_now or bleu_now or save:  # the step loop's one host round trip.
        read = runner.read_totals(totals)
        results["skipped_updates"] = check_update(read, unread, step, config.train.skip_nonfinite_updates,
                                                  checkpointer)
        progress.add(read)
        totals, unread = runner.new_totals(), step + 1
      if log:
        averages = progress.report(step)
        results.update(step=step, train_loss=averages["loss"], tokens_per_second=averages["tokens_per_second"])
      if evaluate_now:
        with progress.paused():
          results.update({f"eval_{k}": v for k, v in
                          evaluate(runner.eval_step, state.params, datasets.eval_batches("valid")).items()})
        say(f"eval step {step}: loss {results['eval_loss']:.4f} | accuracy {results['eval_accuracy']:.3f} | "
            f"perplexity {results['eval_perplexity']:.2f}")
        progress.scalars(step, {k[5:]: results[k] for k in ("eval_loss", "eval_accuracy", "eval_perplexity")},
                         prefix="eval/")
      if bleu_now:
        with progress.paused():
          progress.scalars(step, test_bleu(config, model, runner.host_params(state), tokenizer, datasets),
                           prefix="test/")
      if save:
        with progress.paused():
          checkpointer.save(step, runner.checkpoint_view(state), datasets.train, force=preempted or last)
      if preempted:
        checkpointer.wait()
        say(f"preempted: saved step {step} to {checkpointer.directory}; rerun the same command to resume")
        results["preempted"] = True
        return results
    checkpointer.wait()
    preemption.check("before the test-set BLEU")
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
    write_json(workdir / "results.json", results)
    say(f"done: step {results['step']}, BLEU {results['bleu']:.2f}, eval loss {results.get('eval_loss', 0):.4f}, "
        f"{results['tokens_per_second']:,.0f} tokens/s over {format_duration(results['train_seconds'])} of "
        f"training; results in {workdir / 'results.json'}")
    return results
  finally:
    checkpointer.close()
    progress.close()
