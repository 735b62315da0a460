"""Time-budget training (`train.budget_minutes=M`): measure the step time, then fix the number of steps.

The steps are planned twice, after the first timed steps and most of the way through (a plan from the start alone
misses the budget as the step time drifts), and the plan is kept in `<workdir>/budget.json` for resume. What counts
against the budget, the phases in order, resume and several processes: docs/training.md#time-budget.
"""

from __future__ import annotations

import json
import math
import time
from typing import Callable

import jax
import numpy as np
from etils import epath
from jax.experimental import multihost_utils

from jformer.config import RunSettings
from jformer.config.schema import TrainSection
from jformer.parallel import say
from jformer.train.optim import cooldown_steps
from jformer.train.progress import write_json

# Steps before the timed ones, the compiling one included (not in the estimate): the input pipeline fills and the
# first runs settle (the first steps after compiling run slower than the rest).
WARMUP_STEPS = 10
MEASURE_STEPS = 20  # steps timed at least; they fix how many steps make up the timed window.
MEASURE_FRACTION = 0.1  # the timed window: this fraction of the budget...
MEASURE_MAX_SECONDS = 300.0  # ...but at most this long.
RESERVE_FRACTION = 0.02  # of the budget, left unplanned for what the steps after the final plan do differently.
REPLAN_FRACTION = 0.85  # the final plan: this fraction of the way from the first plan to its cool-down.
MIN_STEPS = 2 * (WARMUP_STEPS + MEASURE_STEPS)  # least planned total: measuring takes at most half the run.
PLAN_FILE = "budget.json"  # <workdir>/budget.json: the plan, read back on resume.


class BudgetTooSmallError(ValueError):
  """The budget leaves time for fewer steps than `plan_steps`'s `min_steps`."""


def evaluations(first_step: int, last_step: int, eval_every: int) -> int:
  """Evaluations the loop runs in steps `first_step`..`last_step`: every multiple of `eval_every`, and the last step
  (once, if it is not a multiple)."""
  if last_step < first_step:
    return 0
  periodic = last_step // eval_every - (first_step - 1) // eval_every
  return periodic + (last_step % eval_every != 0)


def plan_steps(*, budget_seconds: float, spent_seconds: float, done_steps: int, step_seconds: float,
               eval_seconds: float, eval_every: int, min_steps: int) -> int:
  """The total number of steps of a budgeted run: the largest S with

      spent_seconds + (S - done_steps) * step_seconds + evaluations(done_steps + 1, S) * eval_seconds <= budget_seconds

  (rounded down: the estimate never exceeds the budget), given `done_steps` steps done in `spent_seconds`.

  Raises:
    BudgetTooSmallError: when S < `min_steps`, naming the measured times and a budget that would do.
    ValueError: on a step time that is not positive.
  """
  if not step_seconds > 0:
    raise ValueError(f"step time must be positive, got {step_seconds}")
  left = budget_seconds - spent_seconds

  def cost(steps: int) -> float:
    return (steps - done_steps) * step_seconds + evaluations(done_steps + 1, steps, eval_every) * eval_seconds

  # The amortised estimate (an evaluation every eval_every steps), then the exact cost decides.
  total = done_steps + max(math.floor(left / (step_seconds + eval_seconds / eval_every)), 0)
  while cost(total + 1) <= left:
    total += 1
  while total > done_steps and cost(total) > left:
    total -= 1
  if total < min_steps:
    need = spent_seconds + cost(min_steps)
    raise BudgetTooSmallError(
        f"train.budget_minutes={budget_seconds / 60:g} leaves time for {total} steps ({spent_seconds:.1f}s spent on "
        f"{done_steps} steps, then {step_seconds:.3f}s per step and {eval_seconds:.1f}s per evaluation), fewer than "
        f"the {min_steps} a budgeted run needs; give "
        f"train.budget_minutes >= {math.ceil(need / 60 * 10) / 10:g} or use train.steps")
  return total


def replan_step(plan_step: int, planned_steps: int, cooldown_fraction: float) -> int:
  """The step of the final plan: `REPLAN_FRACTION` of the way from the first plan (made at `plan_step`, for
  `planned_steps`) to its cool-down, or to its end without one; after `plan_step` in any case. Late enough to time
  most of the run, early enough that a machine some 10% slower than first timed still plans before its cool-down."""
  cooldown_from = planned_steps - cooldown_steps(planned_steps, cooldown_fraction)
  return plan_step + max(math.floor(REPLAN_FRACTION * (cooldown_from - plan_step)), 1)


def stored_plan(train: TrainSection, workdir: epath.PathLike) -> dict:
  """The plan in `<workdir>/budget.json` of a budgeted run ({} if none, or without a budget).

  Raises:
    ValueError: the workdir holds the plan of another `train.budget_minutes` (checked before anything is written).
  """
  path = epath.Path(workdir) / PLAN_FILE
  minutes = float(train.budget_minutes)
  if not minutes or not path.exists():
    return {}
  plan = json.loads(path.read_text())
  if plan["budget_minutes"] != minutes:
    raise ValueError(f"{path} holds the plan of train.budget_minutes={plan['budget_minutes']:g} "
                     f"({plan['planned_steps']} steps), not {minutes:g}: resume with "
                     f"train.budget_minutes={plan['budget_minutes']:g}, or with train.budget_minutes=0 and "
                     "train.steps=N to train to another step count")
  return plan


class Budget:
  """The run's number of steps: `train.steps`, or the plan of `train.budget_minutes` (made after the first steps,
  made again at `replan_step`, or read from `<workdir>/budget.json` on resume). `total_steps` is None until planned;
  `final` says whether it can still change (the cool-down's schedule compiles once it cannot)."""

  def __init__(self, settings: RunSettings, workdir: epath.PathLike, start_step: int):
    self.minutes = float(settings.train.budget_minutes)
    self.eval_every, self.warmup_steps = settings.train.eval_every, settings.optimizer.warmup_steps
    self.cooldown_fraction = float(settings.optimizer.cooldown_fraction)
    self.recompiles = bool(self.cooldown_fraction)  # the loop compiles the steps again after the final plan.
    self._created = time.perf_counter()  # just before the first (compiling) step.
    self.path = epath.Path(workdir) / PLAN_FILE
    self.start_step, self.plan_step, self.replan_step = start_step, None, None  # fixed as the run goes.
    self._measure_from = start_step + WARMUP_STEPS  # the timed window begins after this step.
    self._clock = self._measure_start = None
    self.plan = stored_plan(settings.train, workdir)
    self.total_steps = self.plan.get("planned_steps") if self.minutes else settings.train.steps
    self.final = self.total_steps is not None  # a stored plan is kept as it is (no new measurement on resume).
    if self.plan:
      say(f"budget: {self.total_steps} steps planned for {self.minutes:g} minutes ({self.path})")

  def after_step(self, step: int, state, evaluate: Callable[[bool], None]) -> bool:
    """Called after every train step (all processes): starts the clock after the compiling step, times the
    measured steps and, at `plan_step`, calls `evaluate(log=True)` then times `evaluate(log=False)`, plans, logs and
    stores the plan; at `replan_step` plans again from the step time since the window began. Returns whether it
    evaluated at this step."""
    if not self.minutes:
      return False
    if step == self.start_step + 1:
      self._clock = _now_after(state)
      self._first_step_seconds = self._clock - self._created
    if self.final:
      return False
    measure_from = self._measure_from
    if step == measure_from:
      self._measure_start = _now_after(state)
    if step == measure_from + MEASURE_STEPS:
      self.plan_step = measure_from + self._window_steps((_now_after(state) - self._measure_start) / MEASURE_STEPS)
    if step == self.replan_step:
      self._replan(step, _now_after(state))
      return False
    if step != self.plan_step:
      return False
    now = _now_after(state)
    evaluate(True)  # compiles the eval step.
    evaluated = time.perf_counter()
    evaluate(False)
    self.eval_seconds = time.perf_counter() - evaluated
    step_seconds = self._step_seconds(step, now)
    self.compile_seconds = 0.0
    if self.recompiles:  # the first step and first evaluation less their steady times: what compiling them took.
      self.compile_seconds = (max(self._first_step_seconds - step_seconds, 0.0)
                              + max(evaluated - now - self.eval_seconds, 0.0))
    self.total_steps = self._planned(step, now, step_seconds, min_steps=max(MIN_STEPS, 2 * step - self.start_step))
    self.replan_step = replan_step(step, self.total_steps, self.cooldown_fraction)
    self.plan = {"budget_minutes": self.minutes, "planned_steps": self.total_steps, "step_seconds": step_seconds,
                 "eval_seconds": self.eval_seconds, "compile_seconds": self.compile_seconds,
                 "planned_at_step": step, "measured_steps": step - measure_from,
                 "reserve_seconds": self._reserve_seconds(), "replan_at_step": self.replan_step}
    write_json(self.path, self.plan)
    compiling = f", {self.compile_seconds:.1f}s to compile the cool-down schedule" if self.recompiles else ""
    short = (f"; fewer than optimizer.warmup_steps={self.warmup_steps}: the learning rate stops before its peak"
             if self.total_steps < self.warmup_steps else "")
    say(f"budget: {step_seconds:.4f}s per step (mean of steps {measure_from + 1}-{step}), "
        f"{self.eval_seconds:.2f}s per evaluation (every {self.eval_every} steps and at the end)"
        f"{compiling} -> {self.total_steps} "
        f"steps planned for train.budget_minutes={self.minutes:g} (replaces train.steps; stored in {self.path}; "
        f"{self._reserve_seconds():.1f}s held back; planned again at step {self.replan_step}){short}")
    return True

  def _replan(self, step: int, now: float):
    """The final plan: the step time over the whole window so far (steps `measure_from`+1..`step`, periodic
    evaluations taken out; checkpoint writes and slower stretches in), and the budget left at `step`."""
    first = self.total_steps
    step_seconds = self._step_seconds(step, now)
    # At least one more step: a machine slowed down this much ends one step later than its budget.
    self.total_steps = max(self._planned(step, now, step_seconds, min_steps=0), step + 1)
    self.final = True
    self.plan.update({"planned_steps": self.total_steps, "first_planned_steps": first, "replanned_at_step": step,
                      "step_seconds": step_seconds})
    write_json(self.path, self.plan)
    cooldown_from = self.total_steps - cooldown_steps(self.total_steps, self.cooldown_fraction) + 1
    late = (f"; the cool-down should have begun at step {cooldown_from}: its learning rate drops at once"
            if cooldown_from <= step else "")  # without a cool-down, cooldown_from is past the last step.
    say(f"budget: planned again at step {step}: {step_seconds:.4f}s per step (mean of steps "
        f"{self._measure_from + 1}-{step}) -> {self.total_steps} steps (first plan {first}; stored in "
        f"{self.path}){late}")

  def _step_seconds(self, step: int, now: float) -> float:
    """Seconds per step from the window's start to `step`, the periodic evaluations inside it taken out."""
    periodic = (step - 1) // self.eval_every - self._measure_from // self.eval_every  # evaluations in the window.
    return max(now - self._measure_start - periodic * self.eval_seconds, 0.0) / (step - self._measure_from)

  def _reserve_seconds(self) -> float:
    return RESERVE_FRACTION * self.minutes * 60

  def _planned(self, step: int, now: float, step_seconds: float, *, min_steps: int) -> int:
    """`plan_steps` at `step` from process 0's times (every process plans the same steps, or stops with the same
    error): what the run spent, the steps of a stopped run re-timed, the reserve and the cool-down's compilation."""
    spent = now - self._clock + self.start_step * step_seconds + self._reserve_seconds() + self.compile_seconds
    eval_seconds = self.eval_seconds
    if jax.process_count() > 1:
      step_seconds, eval_seconds, spent = (float(x) for x in multihost_utils.broadcast_one_to_all(
          np.asarray([step_seconds, eval_seconds, spent], np.float32)))
    return plan_steps(budget_seconds=self.minutes * 60, spent_seconds=spent, done_steps=step,
                      step_seconds=step_seconds, eval_seconds=eval_seconds, eval_every=self.eval_every,
                      min_steps=min_steps)

  def _window_steps(self, step_seconds: float) -> int:
    """Steps of the timed window: MEASURE_FRACTION of the budget (at most MEASURE_MAX_SECONDS) at the step time of
    its first MEASURE_STEPS, and no fewer than those. Every process takes process 0's, so all plan at one step."""
    seconds = min(MEASURE_FRACTION * self.minutes * 60, MEASURE_MAX_SECONDS)
    steps = max(MEASURE_STEPS, math.ceil(seconds / max(step_seconds, 1e-9)))
    if jax.process_count() > 1:
      steps = int(multihost_utils.broadcast_one_to_all(np.int32(steps)))
    return steps

  def results(self) -> dict:
    """The plan and the wall-clock seconds this process counted against the budget until now (compile excluded),
    for results.json; {} without a budget."""
    if not self.minutes:
      return {}
    seconds = time.perf_counter() - self._clock if self._clock is not None else 0.0
    return {"budget_minutes": self.minutes, "planned_steps": self.total_steps,
            "budget_step_seconds": self.plan["step_seconds"], "budget_eval_seconds": self.plan["eval_seconds"],
            "budget_wall_seconds": seconds}


def _now_after(state) -> float:
  """The clock once the device has finished every step dispatched so far (steps run ahead of the host)."""
  jax.block_until_ready(state)
  return time.perf_counter()
