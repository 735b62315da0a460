"""`train_and_evaluate(config, workdir)`: init -> restore -> steps -> eval -> test -> checkpoint.

What is evaluated and tested comes from the run's task (`jformer.tasks`: BLEU for translation, bits per byte
for a language model).

Workdir layout: config.json (the resolved config), vocab/ (SentencePiece), tfds/ (prepared data),
checkpoints/ (Orbax: state + data iterator), tensorboard/, results.json, averaged/ (averaged parameters),
budget.json (the planned steps of a time-budget run).
Running it again on the same workdir resumes from the latest checkpoint; on a finished run it says so in one line
and changes nothing (raise train.steps to train on). Every phase's results are merged into results.json
(`finished: false` after training, `true` after the final test), so a run stopped during its final test (BLEU, bits
per byte) runs only that test again. SIGTERM saves a step all hosts agree on
(or, before the first step, saves nothing) and exits with status 0 (`jformer.train.preemption`).
With `train.budget_minutes`, the number of steps is planned after the first steps, replaces train.steps and is
kept in budget.json for resume (`jformer.train.budget`).
The workdir is a local folder or any `etils.epath` path (gs://bucket/run): every file goes through epath.

The step loop never waits for the device: the step's metrics are summed on device and read every
`train.log_every` steps, and before every evaluation, BLEU and checkpoint, where non-finite updates are checked.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging
from etils import epath

from jformer import checkpoint, coordination, data, paths, tasks
from jformer import config as config_lib
from jformer.models.summary import param_shapes
from jformer.parallel import say
from jformer.train import averaging, initialize, selection, transfer, workdir_lock
from jformer.train.budget import Budget, stored_plan
from jformer.train.cost import StepCost, StepProfile, peak_memory
from jformer.train.preemption import Preempted, Preemption, stop_at_once
from jformer.train.progress import Progress, format_duration, write_json
from jformer.train.runner import eval_step_for_host_params, make_runner, placement
from jformer.train.step import FINITE_CHECKS, parameter_names


class NonFiniteUpdateError(FloatingPointError):
  """A step's loss, gradients or updated parameters were NaN or Inf once more than `train.skip_nonfinite_updates`
  allows; the run stops and keeps the last good checkpoint."""


def _non_finite(finite, leaf: int, names: list[str]) -> str:
  """What a step's `FINITE_CHECKS` flags say was not finite, e.g. 'gradients (the first: decoder/layer_0/...) and
  updated parameters', naming the first parameter whose gradient was not finite (`leaf`, an index into `names`)."""
  first = f" (the first: {names[leaf]})" if 0 <= leaf < len(names) else ""
  bad = [name + (first if name == "gradients" else "") for name, ok in zip(FINITE_CHECKS, finite) if not ok]
  return f"{', '.join(bad[:-1])} and {bad[-1]}" if len(bad) > 1 else bad[0]


def check_update(totals: dict, first_step: int, last_step: int, allowed: int, checkpointer,
                 names: list[str] = ()) -> int:
  """Checks the train-step totals of steps `first_step`..`last_step`, read from the device
  (`jformer.train.step.new_totals`), and returns the run's skipped updates so far. `names`: the parameters' paths
  (`jformer.train.step.parameter_names`), to name the first whose gradient was not finite.

  The step never applies a non-finite update (it keeps the old state), so every saved state is finite. Skipped
  updates are reported (how many, and the first) while at most `allowed` were skipped in the run; the first step
  beyond that stops the run, naming that step, what was non-finite and the last checkpoint. The loop checks before
  every save, so no checkpoint is written after that step.
  """
  skipped = int(totals["skipped_updates"])
  if totals["stop_step"] >= 0:
    last = checkpointer.latest_step()
    kept = (f"The last good checkpoint is step {last} in {checkpointer.directory}." if last is not None
            else "No checkpoint was saved before it, so the workdir holds no run: train again with the fix (any "
            "config) in it.")
    after = f" after {allowed} skipped updates" if allowed else ""
    raise NonFiniteUpdateError(f"step {int(totals['stop_step'])}: non-finite "
                               f"{_non_finite(totals['stop_finite'], int(totals['stop_leaf']), names)}; "
                               f"stopping{after} (train.skip_nonfinite_updates={allowed}). {kept}")
  count = int(totals["skipped"])
  if count:
    say(f"steps {first_step}-{last_step}: {count} non-finite update{'s' if count > 1 else ''} skipped, the first at "
        f"step {int(totals['first_bad_step'])} (non-finite "
        f"{_non_finite(totals['first_bad_finite'], int(totals['first_bad_leaf']), names)}); "
        f"{skipped} of {allowed} allowed")
  return skipped


def check_resume(config, workdir: epath.PathLike) -> None:
  """On a workdir that holds a run (its config.json): refuses a change of the keys that define the run
  (its identity keys: model shape, vocabulary, data), naming them, and warns naming the other keys that changed.
  Reads only, so a refused run leaves the workdir as it was."""
  path = epath.Path(workdir) / "config.json"
  if not path.exists():
    return
  run = config_lib.read_run(workdir, verify=jax.process_index() == 0)  # process 0 checks config.json's checksum.
  changed = config_lib.check_same_run(run, config, f"{workdir} holds a run that",
                                      f"change them back (see {path}) or train in a new --workdir")
  if changed:
    logging.warning("Resuming with changed config keys: %s (previous config in %s).",
                    ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changed.items()), path)


RESULTS_FILE = "results.json"


def read_results(workdir: epath.PathLike) -> dict:
  """`<workdir>/results.json` ({} when absent): the merged results of every phase the run has finished."""
  path = epath.Path(workdir) / RESULTS_FILE
  return json.loads(path.read_text()) if path.exists() else {}


def finished_results(config, workdir: epath.PathLike) -> dict | None:
  """The results of a run in `workdir` that has done everything `config` asks (trained to its steps, or to its
  time budget's plan, and its final test written), else None. Results written before the `finished` flag existed
  were written only at the very end, so they count as finished."""
  results = read_results(workdir)
  total = stored_plan(config, workdir).get("planned_steps") if config.train.budget_minutes else config.train.steps
  if not results or total is None or not results.get("finished", True):
    return None
  ended = results.get("stopped_by_patience") and selection.patience_ended(config.train, workdir)
  return results if results.get("step", 0) >= total or ended else None


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: epath.PathLike) -> dict:
  """Trains `config` in `workdir` (resuming if it holds checkpoints) and returns the final results.

  On SIGTERM it returns early with `preempted=True` in the results (see `jformer.train.preemption`). A second job
  on the same workdir is refused while this one runs (`jformer.train.workdir_lock`).
  """
  workdir = paths.absolute(workdir)
  check_resume(config, workdir)  # a changed model, vocabulary or data: one line naming the keys, nothing written.
  initialize.check_source(config, workdir)  # train.initialize_from without its vocabulary: one line.
  stored_plan(config, workdir)  # another train.budget_minutes than the one planned: one line, nothing written.
  done = finished_results(config, workdir)
  if done is not None:  # run again: one line, nothing changed.
    summary = tasks.get(config.model.architecture).task.summary(done)
    say(f"{workdir} holds a finished run: step {done['step']}, {summary} ({workdir / RESULTS_FILE}); nothing to do "
        "(to train on, raise train.steps or train.budget_minutes)")
    return done
  # Bad data, vocabulary or workdir: one line, nothing written; the files are read by process 0 only.
  coordination.process_0_decides("run inputs", lambda: data.check_run_inputs(config, workdir))
  workdir.mkdir(parents=True, exist_ok=True)
  with workdir_lock.hold(workdir), Preemption() as preemption:
    try:
      return _train_and_evaluate(config, workdir, preemption)
    except Preempted as stop:
      say(f"preempted {stop}: no step was trained since the last checkpoint, so none was saved; rerun the same "
          "command to resume")
      return {"preempted": True}


def _train_and_evaluate(config: ml_collections.ConfigDict, workdir: epath.PathLike, preemption: Preemption) -> dict:
  tokenizer = data.prepare(config, workdir)  # tfds data and vocabulary: process 0 first, then the others.
  if tokenizer.vocab_size != config.model.vocab_size:
    raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but model.vocab_size={config.model.vocab_size}")
  preemption.check("during the data preparation")
  task = tasks.make_task(config, workdir, tokenizer)  # builds this host's datasets.
  datasets = task.datasets
  say(datasets.describe(config.data.max_length))
  preemption.check("while reading the data")

  model = tasks.build_model(config, mesh=placement(config.parallel))  # the one build of the run's model.
  example = {k: jnp.zeros((1, config.data.max_length), jnp.int32) for k in ("inputs", "targets")}

  def runner_for(total_steps):  # its learning rate cools down over the last steps of total_steps (None: unknown).
    tx, schedule = transfer.run_optimizer(config, total_steps)
    return make_runner(config, model, tx, schedule, example)

  schedule_steps = None if config.train.budget_minutes else config.train.steps
  runner = runner_for(schedule_steps)
  state = runner.init_state(jax.random.PRNGKey(config.train.seed))
  num_params = sum(x.size for x in jax.tree.leaves(runner.checkpoint_view(state).params))
  say(f"model: {num_params / 1e6:.2f}M parameters, {jnp.dtype(model.config.compute_dtype).name} compute "
      f"(model.dtype={config.model.dtype}); {runner.describe(state)}")

  checkpointer = checkpoint.Checkpointer(checkpoint.checkpoints_dir(workdir),
                                         max_to_keep=config.train.keep_checkpoints,
                                         save_interval_steps=config.train.checkpoint_every)
  latest = checkpointer.latest_step()
  if latest is not None:
    fits = checkpoint.shapes.expected(param_shapes(model))  # a step of another model is named, and skipped.
    if checkpointer.params_only(latest):  # an imported model's parameters: its optimizer state starts now.
      state = initialize.with_params(runner, state, checkpointer.restore_params(latest, params=fits))
    else:
      state = runner.from_checkpoint(checkpointer.restore(runner.abstract_state(), datasets.train, params=fits))
    say(f"resumed from step {checkpointer.latest_step()} ({checkpointer.directory})")
  elif config.train.initialize_from:
    state = initialize.start_from(config, workdir, runner, state)
  start_step = int(runner.checkpoint_view(state).step)

  cost = StepCost.of(model.config, config.data.max_length)  # on a CPU a short matmul probe, before any clock starts.
  say(f"cost: {cost.describe()}")
  budget = Budget(config, workdir, start_step)  # train.steps, or train.budget_minutes's plan (None until made).

  def rescheduled(runner):  # a cool-down needs the final total: the steps compile again (the plan reserved it).
    nonlocal schedule_steps
    if not config.optimizer.cooldown_fraction or not budget.final or budget.total_steps == schedule_steps:
      return runner
    schedule_steps = budget.total_steps
    return runner_for(schedule_steps)

  runner = rescheduled(runner)  # resumed with a stored plan: nothing compiled yet.
  averaging_at = ()  # the steps of the checkpoints the run averages (train.average_span), kept once known.

  def averaging_steps():
    nonlocal averaging_at
    if config.train.average_span and budget.total_steps:
      steps = averaging.window(budget.total_steps, config.train.average_checkpoints, config.train.average_span)
      if steps != averaging_at:
        averaging_at = steps
        checkpointer.keep(steps)
    return averaging_at

  kept = selection.KeptBest(config.train, task, workdir, checkpointer)  # train.keep_best, train.patience.
  progress = Progress(workdir, budget.total_steps, start_step, cost, getattr(datasets, "tokens_by_source", None))
  profile = StepProfile(workdir, config.train.profile_steps, progress.paused)  # a jax.profiler trace of steps.
  # Every phase's results merge into what the run wrote before (a rerun after the training finished only tests).
  results = {**read_results(workdir), "step": start_step, "finished": False, "stopped_by_patience": False,
             "skipped_updates": int(runner.checkpoint_view(state).skipped_updates)}
  totals, unread = runner.new_totals(), start_step + 1  # metrics of steps unread..step, summed on device.
  step, recorded = start_step, False
  try:
    preemption.start(start_step, checkpointer)

    def evaluate(step, log=True):  # the valid split's metrics, logged and in the results unless log is False.
      with progress.paused():
        metrics = task.evaluate(runner.eval_step, state.params, "valid")
        metrics.update(kept.score(metrics, model, lambda: runner.host_params(state)))
      if log:
        results.update({f"eval_{k}": v for k, v in metrics.items()})
        say(f"eval step {step}: {task.eval_line(metrics)}{kept.observe(step)}")
        progress.scalars(step, metrics, prefix="eval/")

    while budget.total_steps is None or step < budget.total_steps:
      step += 1
      batch = next(datasets.train)
      input_tokens = float(sum(np.count_nonzero(batch[key]) for key in ("inputs", "targets") if key in batch))
      if step == start_step + 1:  # compiles the step (its first call reuses it) and reads its temporary memory.
        temp_bytes = runner.step_temp_bytes(state, batch)
        if temp_bytes is not None:
          results["step_temp_mib"] = temp_bytes / 2**20
          say(f"train step: {results['step_temp_mib']:,.1f} MiB of temporary memory per device (compiled)")
      profile.before(step)
      state, metrics = runner.train_step(state, batch)
      profile.after(step, state)
      totals = runner.add_to_totals(totals, metrics)
      progress.step(input_tokens, timed=step > start_step + 1)  # the first step includes compilation.
      evaluated = budget.after_step(step, state, lambda log: evaluate(step, log))  # planning: times an evaluation.
      runner = rescheduled(runner)
      progress.total_steps = budget.total_steps
      preempted = preemption.reached(step, checkpointer)
      last = step == budget.total_steps
      log = step % config.train.log_every == 0 or last
      evaluate_now = not preempted and not evaluated and (step % config.train.eval_every == 0 or last)
      test_now = not preempted and task.test_every and step % task.test_every == 0 and not last
      averaged = step in averaging_steps()
      save = preempted or last or averaged or checkpointer.should_save(step)
      if log or evaluate_now or test_now or save or kept.step == step:  # the step loop's one host round trip.
        read = runner.read_totals(totals)
        results["skipped_updates"] = check_update(read, unread, step, config.train.skip_nonfinite_updates,
                                                  checkpointer, parameter_names(state.params))
        progress.add(read)
        totals, unread = runner.new_totals(), step + 1
      if log:
        averages = progress.report(step)
        results.update(step=step, train_loss=averages["loss"], tokens_per_second=averages["tokens_per_second"],
                       **{f"train_{k}": v for k, v in averages.items() if k.startswith("tokens/")})
      if evaluate_now:
        evaluate(step)
      stopping = not last and kept.exhausted()  # train.patience: the run ends here.
      if stopping:
        say(kept.stop_line(step))
        results["stopped_by_patience"] = last = True
      best_now = kept.step == step  # a gain at this step's evaluation: its checkpoint is kept.
      if test_now:
        with progress.paused():
          progress.scalars(step, task.test(model, runner.host_params(state)), prefix="test/")
      if last:
        results.update(budget.results())  # the budget's time ends here: the final save and test are outside.
      if save or best_now or last:
        with progress.paused():
          if not recorded:  # the run's identity, recorded with this start's first checkpoint.
            config_lib.write_run(config, workdir)
            recorded = True
          checkpointer.save(step, runner.checkpoint_view(state), datasets.train,
                            force=preempted or last or averaged or best_now)
      if preempted:
        checkpointer.wait()
        say(f"preempted: saved step {step} to {checkpointer.directory}; rerun the same command to resume")
        results["preempted"] = True
        return results
      if stopping:
        break
    checkpointer.wait()
    results["step"] = step
    trained = step > start_step
    if trained:
      results["train_seconds"] = progress.train_seconds + 0.0
      results["tokens_per_second"] = progress.train_tokens / max(progress.train_seconds, 1e-9)
      results["mfu"] = cost.mfu(results["tokens_per_second"])
      results.update([peak_memory()])
      write_json(workdir / RESULTS_FILE, results)  # the training's results, before the (resumable) final test.
    preemption.check("before the final test")
    if not trained:  # a rerun that only tests: this start's config recorded as a training start's is.
      config_lib.write_run(config, workdir)
    params, kept_results = kept.choose(step, runner.host_params(state))  # train.keep_best's step, or the last.
    results.update(kept_results)
    if config.train.average_checkpoints > 1:
      if "eval_loss" not in results:  # a run whose last step's evaluation is not in its results.
        evaluate(step)
      params, averaged_results = averaging.choose(
          config.train, workdir, results["step"], params, results["eval_loss"],
          lambda mean: task.evaluate(runner.eval_step, runner.device_params(mean), "valid"))
      results.update(averaged_results)
    say(f"final test of step {results['step']}")
    with stop_at_once("during the final test"):  # nothing to save: the rerun tests again (its results unfinished).
      results.update(task.final_results(model, params, eval_step_for_host_params(runner, params)),
                     finished=True)
    progress.scalars(results["step"], task.final_scalars(results), prefix="test/")
    write_json(workdir / RESULTS_FILE, results)
    trained_line = (f"{results['tokens_per_second']:,.0f} tokens/s over {format_duration(results['train_seconds'])} "
                    "of training" if "train_seconds" in results else "")
    say(f"done: step {results['step']}, {task.summary(results)}"
        + (f", eval loss {results['eval_loss']:.4f}" if "eval_loss" in results else "")
        + (f", {trained_line}" if trained_line else "") + f"; results in {workdir / RESULTS_FILE}")
    return results
  finally:
    profile.close()
    checkpointer.close()
    progress.close()
