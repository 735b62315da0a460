"""The best checkpoint by a valid metric (`train.keep_best`) and early stopping (`train.patience`): fairseq's
`checkpoint_best.pt` and `--patience`. `<workdir>/best.json` holds every evaluation's value, written once the best
step's checkpoint is on disk; the final test uses the best step. Behaviour in full: docs/training.md (the best
checkpoint and patience).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from etils import epath

from jformer import checkpoint
from jformer.config.schema import TrainSection
from jformer.parallel import say
from jformer.tasks.metrics import KEPT_METRICS, NO_KEPT_METRIC
from jformer.train.progress import write_json


def best_of(history: list[list], higher_is_better: bool) -> tuple[int | None, float | None, int]:
  """(best step, its value, evaluations after it) of `history` ([step, value] in order): the first evaluation of the
  best value wins (a later tie is no gain)."""
  best_step = best_value = None
  since = 0
  for step, value in history:
    if best_value is None or (value > best_value if higher_is_better else value < best_value):
      best_step, best_value, since = step, value, 0
    else:
      since += 1
  return best_step, best_value, since


def patience_ended(train: TrainSection, workdir: epath.PathLike) -> bool:
  """Whether the run in `workdir` has had `train.patience` evaluations in a row without a gain (its best.json)."""
  state = checkpoint.read_best(workdir)
  if not train.patience or state.get("metric") != train.keep_best:
    return False
  return best_of(state["history"], KEPT_METRICS[state["metric"]])[2] >= train.patience


class KeptBest:
  """The run's best checkpoint by `train.keep_best` and its patience (docs/training.md); inactive with 'none'.

  The loop calls `score` in each evaluation (its extra metrics, e.g. {"bleu": ...}), `observe` when the evaluation is
  logged, saves the step when `step` names it, stops when `exhausted`, and tests what `choose` gives.
  """

  def __init__(self, train: TrainSection, task, workdir: epath.PathLike, checkpointer: checkpoint.Checkpointer):
    self.metric, self.patience = train.keep_best, train.patience
    self.active = self.metric != NO_KEPT_METRIC
    self.higher_is_better = KEPT_METRICS.get(self.metric, False)
    self.task, self.workdir, self.checkpointer = task, workdir, checkpointer
    self.history: list[list] = []  # [step, value] of every logged evaluation.
    self.step: int | None = None  # the best step so far (None before the first evaluation).
    self.seconds: list[float] = []  # what scoring took, per evaluation.
    self._value = None  # the last score.
    self._kept: list[int] = []  # the step best.json names and the later bests it does not name yet: never deleted.
    if self.active:
      self._resume()

  def _resume(self):
    """Reads best.json: the evaluations up to the latest checkpoint (later ones are trained again), its best kept."""
    state = checkpoint.read_best(self.workdir)
    if not state:
      return
    if state["metric"] != self.metric:
      say(f"keep_best: {checkpoint.best_path(self.workdir)} kept '{state['metric']}', this run keeps "
          f"'{self.metric}': the best checkpoint is chosen afresh from the next evaluation")
      return
    latest = self.checkpointer.latest_step() or 0
    self.history = [entry for entry in state["history"] if entry[0] <= latest]
    best = best_of(self.history, self.higher_is_better)[0]
    if best is not None and best not in self.checkpointer.all_steps():
      say(f"keep_best: the best checkpoint, step {best}, is not in {self.checkpointer.directory}: the best "
          "checkpoint is chosen afresh from the next evaluation")
      self.history = []
    elif best is not None:
      self.step = best
      self._keep([best])

  def score(self, metrics: dict, model, host_params: Callable[[], Any]) -> dict:
    """The kept metric of an evaluation whose valid `metrics` are given, as extra metrics to log (none where it is
    one of them, e.g. {"bleu": 31.2} for valid_bleu); `host_params()` gives the parameters to decode with."""
    if not self.active:
      return {}
    start = time.perf_counter()
    self._value = float(self.task.kept_value(self.metric, metrics, model, host_params))
    self.seconds.append(time.perf_counter() - start)
    key = self.metric.removeprefix("valid_")
    return {} if key in metrics else {key: self._value}

  def observe(self, step: int) -> str:
    """Records the last `score` as step `step`'s; on a gain keeps the step (the loop saves it right after). best.json is
    written once the best step's checkpoint is on disk. Returns what the evaluation's log line adds, e.g.
    ' | valid_bleu 31.20 (best: kept)'."""
    if not self.active:
      return ""
    self.history.append([step, self._value])
    best, value, since = best_of(self.history, self.higher_is_better)
    self.step = best
    record = {"metric": self.metric, "step": best, "value": value, "history": list(self.history)}
    self.checkpointer.when_saved(best, lambda: self._write(record))
    if best == step:  # kept beside the best that best.json names until it names this one.
      self._keep(self._kept + [step])
      return f" | {self.metric} {self._value:.4g} (best: kept)"
    waited = f"; {since} of train.patience={self.patience} without a gain" if self.patience else ""
    return f" | {self.metric} {self._value:.4g} (best {value:.4g} at step {best}{waited})"

  def _write(self, record: dict) -> None:
    """Writes best.json (its best step's checkpoint is on disk); the bests before that step are kept no longer."""
    write_json(checkpoint.best_path(self.workdir), record)
    self._keep([step for step in self._kept if step >= record["step"]])

  def _keep(self, steps: list[int]) -> None:
    self._kept = steps
    self.checkpointer.keep(steps, why="best")

  def exhausted(self) -> bool:
    """Whether `train.patience` evaluations in a row have brought no gain."""
    return bool(self.active and self.patience and self.history
                and best_of(self.history, self.higher_is_better)[2] >= self.patience)

  def stop_line(self, step: int) -> str:
    _, value, since = best_of(self.history, self.higher_is_better)
    return (f"patience: no gain in {self.metric} over the last {since} evaluations (train.patience={self.patience}; "
            f"best {value:.4g} at step {self.step}): the run ends at step {step}")

  def choose(self, last_step: int, last_params: Any) -> tuple[Any, dict]:
    """(the parameters the final test uses, results.json entries): the best step's, or `last_params` where the last
    step is the best (or there is no kept metric)."""
    if not self.active or self.step is None:
      return last_params, {}
    best, value, _ = best_of(self.history, self.higher_is_better)
    why = (f"the best {self.metric} of {len(self.history)} evaluations (train.keep_best)" if best != last_step
           else f"the last step has the best {self.metric} of {len(self.history)} evaluations (train.keep_best)")
    say(f"keep_best: the final test uses step {best}: {why}, {value:.4g}")
    params = last_params if best == last_step else self.checkpointer.restore_params(best)
    results = {"tested_step": best, "tested_metric": self.metric, "tested_value": value, "tested_why": why,
               "tested_params": "best", "kept_history": self.history}
    if self.seconds:
      results["kept_metric_seconds"] = statistics.median(self.seconds)  # the median: the first call compiles.
    return params, results
