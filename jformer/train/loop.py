"""`train_and_evaluate(config, workdir)`: init -> restore -> steps -> eval -> test -> checkpoint, resumable.

What is evaluated and tested comes from the run's task (`jformer.tasks`). The workdir's layout, resume, the results
merged per phase, and why the step loop never waits for the device: docs/training.md (the workdir).
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
from jformer.config import RunSettings
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


def check_resume(settings: RunSettings, workdir: epath.PathLike) -> None:
  """On a workdir that holds a run (its config.json): refuses a change of the keys that define the run
  (its identity keys: model shape, vocabulary, data), naming them, and warns naming the other keys that changed.
  Reads only, so a refused run leaves the workdir as it was."""
  path = epath.Path(workdir) / "config.json"
  if not path.exists():
    return
  run = config_lib.read_run(workdir, verify=jax.process_index() == 0)  # process 0 checks config.json's checksum.
  changed = config_lib.check_same_run(run, settings.config, f"{workdir} holds a run that",
                                      f"change them back (see {path}) or train in a new --workdir")
  if changed:
    logging.warning("Resuming with changed config keys: %s (previous config in %s).",
                    ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in changed.items()), path)


RESULTS_FILE = "results.json"


def read_results(workdir: epath.PathLike) -> dict:
  """`<workdir>/results.json` ({} when absent): the merged results of every phase the run has finished."""
  path = epath.Path(workdir) / RESULTS_FILE
  return json.loads(path.read_text()) if path.exists() else {}


def finished_results(settings: RunSettings, workdir: epath.PathLike) -> dict | None:
  """The results of a run in `workdir` that has done everything `settings` ask (trained to its steps, or to its
  time budget's plan, and its final test written), else None. Results written before the `finished` flag existed
  were written only at the very end, so they count as finished."""
  results, train = read_results(workdir), settings.train
  total = stored_plan(train, workdir).get("planned_steps") if train.budget_minutes else train.steps
  if not results or total is None or not results.get("finished", True):
    return None
  ended = results.get("stopped_by_patience") and selection.patience_ended(train, workdir)
  return results if results.get("step", 0) >= total or ended else None


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: epath.PathLike) -> dict:
  """Trains `config` in `workdir` (resuming if it holds checkpoints) and returns the final results.

  On SIGTERM it returns early with `preempted=True` in the results (see `jformer.train.preemption`). A second job
  on the same workdir is refused while this one runs (`jformer.train.workdir_lock`).
  """
  settings = config_lib.run_settings(config)  # what the run reads from here on: typed and frozen.
  workdir = paths.absolute(workdir)
  check_resume(settings, workdir)  # a changed model, vocabulary or data: one line naming the keys, nothing written.
  initialize.check_source(settings, workdir)  # train.initialize_from without its vocabulary: one line.
  stored_plan(settings.train, workdir)  # another train.budget_minutes than the one planned: one line, nothing written.
  done = finished_results(settings, workdir)
  if done is not None:  # run again: one line, nothing changed.
    summary = tasks.get(settings.model.architecture).task.summary(done)
    say(f"{workdir} holds a finished run: step {done['step']}, {summary} ({workdir / RESULTS_FILE}); nothing to do "
        "(to train on, raise train.steps or train.budget_minutes)")
    return done
  # Bad data, vocabulary or workdir: one line, nothing written; the files are read by process 0 only.
  coordination.process_0_decides("run inputs", lambda: data.check_run_inputs(config, workdir))
  workdir.mkdir(parents=True, exist_ok=True)
  with workdir_lock.hold(workdir), Preemption() as preemption:
    try:
      return _Run(settings, workdir, preemption).run()
    except Preempted as stop:
      say(f"preempted {stop}: no step was trained since the last checkpoint, so none was saved; rerun the same "
          "command to resume")
      return {"preempted": True}


class _Run:
  """One start of a run, in named steps: `prepare` (data, task, model), `restore` (runner and state), `start` (what
  watches the steps), `train` (the step loop) and `finish` (the final test). Its attributes are the run's pieces."""

  def __init__(self, settings: RunSettings, workdir: epath.Path, preemption: Preemption):
    self.settings, self.train_settings, self.workdir, self.preemption = settings, settings.train, workdir, preemption
    self.recorded = False  # whether this start wrote the run's config (with its first checkpoint, or its test).

  def run(self) -> dict:
    """The run's results: those of its final test, or the training's so far where SIGTERM stopped it."""
    self.prepare()
    self.restore()
    self.start()
    try:
      self.preemption.start(self.start_step, self.checkpointer)
      return self.results if self.train() else self.finish()
    finally:
      self.profile.close()
      self.checkpointer.close()
      self.progress.close()

  def prepare(self) -> None:
    """The tfds data and vocabulary (process 0 first, then the others), this host's datasets and the run's one
    model."""
    settings, config = self.settings, self.settings.config
    tokenizer = data.prepare(config, self.workdir)
    if tokenizer.vocab_size != settings.model.vocab_size:
      raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but model.vocab_size={settings.model.vocab_size}")
    self.preemption.check("during the data preparation")
    self.task = tasks.make_task(config, self.workdir, tokenizer)  # builds this host's datasets.
    self.datasets = self.task.datasets
    say(self.datasets.describe(settings.data.max_length))
    self.preemption.check("while reading the data")
    self.model = tasks.build_model(config, mesh=placement(settings.parallel))  # the one build of the run's model.

  def _runner(self):
    """The runner of the model whose learning rate cools down over the last steps of `schedule_steps` (None: not
    known yet)."""
    tx, schedule = transfer.run_optimizer(self.settings, self.schedule_steps)
    example = {k: jnp.zeros((1, self.settings.data.max_length), jnp.int32) for k in ("inputs", "targets")}
    return make_runner(self.settings, self.model, tx, schedule, example)

  def restore(self) -> None:
    """The runner and the state the steps start from: the latest checkpoint, an imported model's parameters,
    `train.initialize_from`'s, or fresh ones (`train.seed`)."""
    train, model = self.train_settings, self.model
    self.schedule_steps = None if train.budget_minutes else train.steps
    self.runner = runner = self._runner()
    state = runner.init_state(jax.random.PRNGKey(train.seed))
    num_params = sum(x.size for x in jax.tree.leaves(runner.checkpoint_view(state).params))
    say(f"model: {num_params / 1e6:.2f}M parameters, {jnp.dtype(model.config.compute_dtype).name} compute "
        f"(model.dtype={self.settings.model.dtype}); {runner.describe(state)}")
    self.checkpointer = checkpointer = checkpoint.Checkpointer(
        checkpoint.checkpoints_dir(self.workdir), max_to_keep=train.keep_checkpoints,
        save_interval_steps=train.checkpoint_every)
    if checkpointer.latest_step() is not None:
      fits = checkpoint.shapes.expected(param_shapes(model))  # a step of another model is named, and skipped.
      step = checkpointer.valid_step(params=fits)  # the newest that is whole and fits; newer ones set aside.
      if checkpointer.params_only(step):  # an imported model's parameters: its optimizer state starts now.
        state = initialize.with_params(runner, state, checkpointer.restore_params(step, params=fits))
      else:
        state = runner.from_checkpoint(
            checkpointer.restore(runner.abstract_state(), self.datasets.train, step, params=fits))
      say(f"resumed from step {step} ({checkpointer.directory})")
    elif train.initialize_from:
      state = initialize.start_from(self.settings, self.workdir, runner, state)
    self.state, self.start_step = state, int(runner.checkpoint_view(state).step)

  def start(self) -> None:
    """What watches the steps: their cost (MFU), the budget, the best checkpoint and patience, the progress line,
    the profile, the results (merged into what the run wrote before) and the metrics' totals on device."""
    train, start_step = self.train_settings, self.start_step
    self.cost = StepCost.of(self.model.config, self.settings.data.max_length)  # on a CPU a short matmul probe.
    say(f"cost: {self.cost.describe()}")
    self.budget = Budget(self.settings, self.workdir, start_step)  # train.steps, or the plan (None until made).
    self._reschedule()  # resumed with a stored plan: nothing compiled yet.
    self.averaging_at = ()  # the steps of the checkpoints the run averages (train.average_span), kept once known.
    self.kept = selection.KeptBest(train, self.task, self.workdir, self.checkpointer)
    self.progress = Progress(self.workdir, self.budget.total_steps, start_step, self.cost,
                             getattr(self.datasets, "tokens_by_source", None))
    self.profile = StepProfile(self.workdir, train.profile_steps, self.progress.paused)  # a jax.profiler trace.
    self.results = {**read_results(self.workdir), "step": start_step, "finished": False, "stopped_by_patience": False,
                    "skipped_updates": int(self.runner.checkpoint_view(self.state).skipped_updates)}
    self.totals, self.unread = self.runner.new_totals(), start_step + 1  # metrics of steps unread..step, on device.
    self.step = start_step

  def _reschedule(self) -> None:
    """A cool-down needs the final total: once the budget has fixed it, the steps compile again (the plan reserved
    the time)."""
    budget = self.budget
    if self.settings.optimizer.cooldown_fraction and budget.final and budget.total_steps != self.schedule_steps:
      self.schedule_steps = budget.total_steps
      self.runner = self._runner()

  def _averaging_steps(self) -> tuple[int, ...]:
    """The steps of the checkpoints the run averages (`train.average_span`), which the checkpointer keeps."""
    train, total = self.train_settings, self.budget.total_steps
    if train.average_span and total:
      steps = averaging.window(total, train.average_checkpoints, train.average_span)
      if steps != self.averaging_at:
        self.averaging_at = steps
        self.checkpointer.keep(steps)
    return self.averaging_at

  def evaluate(self, step: int, log: bool = True) -> None:
    """The valid split's metrics (and the kept metric's score), logged and in the results unless `log` is False."""
    with self.progress.paused():
      metrics = self.task.evaluate(self.runner.eval_step, self.state.params, "valid")
      metrics.update(self.kept.score(metrics, self.model, lambda: self.runner.host_params(self.state)))
    if log:
      self.results.update({f"eval_{k}": v for k, v in metrics.items()})
      say(f"eval step {step}: {self.task.eval_line(metrics)}{self.kept.observe(step)}")
      self.progress.scalars(step, metrics, prefix="eval/")

  def train(self) -> bool:
    """The step loop, to the budget's total or the end patience sets; True where SIGTERM stopped it (its step
    saved)."""
    train, kept, checkpointer, results = self.train_settings, self.kept, self.checkpointer, self.results
    while self.budget.total_steps is None or self.step < self.budget.total_steps:
      self.step = step = self.step + 1
      evaluated = self._train_step(step)
      preempted = self.preemption.reached(step, checkpointer)
      last = step == self.budget.total_steps
      log = step % train.log_every == 0 or last
      evaluate_now = not preempted and not evaluated and (step % train.eval_every == 0 or last)
      test_now = not preempted and self.task.test_every and step % self.task.test_every == 0 and not last
      averaged = step in self._averaging_steps()
      save = preempted or last or averaged or checkpointer.should_save(step)
      if log or evaluate_now or test_now or save or kept.step == step:  # the step loop's one host round trip.
        self._read_totals(step)
      if log:
        averages = self.progress.report(step)
        results.update(step=step, train_loss=averages["loss"], tokens_per_second=averages["tokens_per_second"],
                       **{f"train_{k}": v for k, v in averages.items() if k.startswith("tokens/")})
      if evaluate_now:
        self.evaluate(step)
      stopping = not last and kept.exhausted()  # train.patience: the run ends here.
      if stopping:
        say(kept.stop_line(step))
        results["stopped_by_patience"] = last = True
      best_now = kept.step == step  # a gain at this step's evaluation: its checkpoint is kept.
      if test_now:
        with self.progress.paused():
          self.progress.scalars(step, self.task.test(self.model, self.runner.host_params(self.state)), prefix="test/")
      if last:
        results.update(self.budget.results())  # the budget's time ends here: the final save and test are outside.
      if save or best_now or last:
        self._save(step, force=preempted or last or averaged or best_now)
      if preempted:
        checkpointer.wait()
        say(f"preempted: saved step {step} to {checkpointer.directory}; rerun the same command to resume")
        results["preempted"] = True
        return True
      if stopping:
        break
    return False

  def _train_step(self, step: int) -> bool:
    """Trains step `step` on the next batch, its metrics added to the totals on device, then lets the budget time
    or plan; returns whether the budget evaluated (its planning step)."""
    batch = next(self.datasets.train)
    input_tokens = float(sum(np.count_nonzero(batch[key]) for key in ("inputs", "targets") if key in batch))
    if step == self.start_step + 1:  # compiles the step (its first call reuses it) and reads its temporary memory.
      temp_bytes = self.runner.step_temp_bytes(self.state, batch)
      if temp_bytes is not None:
        self.results["step_temp_mib"] = temp_bytes / 2**20
        say(f"train step: {self.results['step_temp_mib']:,.1f} MiB of temporary memory per device (compiled)")
    self.profile.before(step)
    self.state, metrics = self.runner.train_step(self.state, batch)
    self.profile.after(step, self.state)
    self.totals = self.runner.add_to_totals(self.totals, metrics)
    self.progress.step(input_tokens, timed=step > self.start_step + 1)  # the first step includes compilation.
    evaluated = self.budget.after_step(step, self.state, lambda log: self.evaluate(step, log))  # times one.
    self._reschedule()
    self.progress.total_steps = self.budget.total_steps
    return evaluated

  def _read_totals(self, step: int) -> None:
    """Reads the totals of the steps since the last read from the device, checks their updates (`check_update`)
    and adds them to the progress line."""
    read = self.runner.read_totals(self.totals)
    self.results["skipped_updates"] = check_update(read, self.unread, step, self.train_settings.skip_nonfinite_updates,
                                                   self.checkpointer, parameter_names(self.state.params))
    self.progress.add(read)
    self.totals, self.unread = self.runner.new_totals(), step + 1

  def _save(self, step: int, force: bool) -> None:
    """Saves step `step`'s checkpoint, the run's identity (config.json) with this start's first one."""
    with self.progress.paused():
      self._record()
      self.checkpointer.save(step, self.runner.checkpoint_view(self.state), self.datasets.train, force=force)

  def _record(self) -> None:
    """Writes the run's config (`config_lib.write_run`) once per start."""
    if not self.recorded:
      config_lib.write_run(self.settings.config, self.workdir)
      self.recorded = True

  def finish(self) -> dict:
    """The final test (the training's results written first: a rerun after them only tests); its results."""
    results, step = self.results, self.step
    self.checkpointer.wait()
    results["step"] = step
    if step > self.start_step:
      results["train_seconds"] = self.progress.train_seconds + 0.0
      results["tokens_per_second"] = self.progress.train_tokens / max(self.progress.train_seconds, 1e-9)
      results["mfu"] = self.cost.mfu(results["tokens_per_second"])
      results.update([peak_memory()])
      write_json(self.workdir / RESULTS_FILE, results)  # the training's results, before the (resumable) final test.
    self.preemption.check("before the final test")
    self._record()  # a rerun that only tests: this start's config recorded as a training start's is.
    params = self._tested_params()
    say(f"final test of step {results['step']}")
    with stop_at_once("during the final test"):  # nothing to save: the rerun tests again (its results unfinished).
      results.update(self.task.final_results(self.model, params, eval_step_for_host_params(self.runner, params)),
                     finished=True)
    self.progress.scalars(results["step"], self.task.final_scalars(results), prefix="test/")
    write_json(self.workdir / RESULTS_FILE, results)
    trained = (f", {results['tokens_per_second']:,.0f} tokens/s over {format_duration(results['train_seconds'])} of "
               "training" if "train_seconds" in results else "")
    evaluated = f", eval loss {results['eval_loss']:.4f}" if "eval_loss" in results else ""
    say(f"done: step {results['step']}, {self.task.summary(results)}{evaluated}{trained}; results in "
        f"{self.workdir / RESULTS_FILE}")
    return results

  def _tested_params(self):
    """The parameters the final test uses: `train.keep_best`'s step, the mean of the averaged checkpoints where its
    valid loss is no higher (`train.average_checkpoints`), or the last step's."""
    results, train = self.results, self.train_settings
    params, kept_results = self.kept.choose(self.step, self.runner.host_params(self.state))
    results.update(kept_results)
    if train.average_checkpoints > 1:
      if "eval_loss" not in results:  # a run whose last step's evaluation is not in its results.
        self.evaluate(self.step)
      params, averaged_results = averaging.choose(
          train, self.workdir, results["step"], params, results["eval_loss"],
          lambda mean: self.task.evaluate(self.runner.eval_step, self.runner.device_params(mean), "valid"))
      results.update(averaged_results)
    return params
