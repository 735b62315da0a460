"""Time-budget training (`train.budget_minutes`, jformer.train.budget): the plan as a pure function, config checks,
and runs that plan, train exactly the planned steps, and resume after SIGTERM to the same planned total."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from helpers import finish, prepared_overrides, start_two_processes, tiny_overrides
from jformer import checkpoint
from jformer import config as config_lib
from jformer.train import budget as budget_lib
from jformer.train.loop import train_and_evaluate

PLAN_STEP = budget_lib.WARMUP_STEPS + budget_lib.MEASURE_STEPS  # the earliest step the plan is made after.
PLAN_LINE = re.compile(rf"^budget: (\d\.\d{{4}})s per step \(mean of steps {budget_lib.WARMUP_STEPS + 1}-"
                       r"(\d+)\), (\d+\.\d\d)s per evaluation \(every 1000 steps and at the end\) "
                       r"-> (\d+) steps planned for train.budget_minutes=[\d.]+ ", re.M)
REPLAN_LINE = re.compile(r"^budget: planned again at step (\d+): (\d\.\d{4})s per step \(mean of steps "
                         rf"{budget_lib.WARMUP_STEPS + 1}-(\d+)\) -> (\d+) steps \(first plan (\d+); ", re.M)


def load(repo_root, corpus, **extra):
  return config_lib.load(repo_root / "configs" / "small.py", tiny_overrides(corpus, **extra))


def budget_overrides(**extra) -> dict:
  """A tiny run of 6 seconds: evaluations only at the plan and the end, checkpoints at the end (and on SIGTERM)."""
  return {"train.budget_minutes": 0.1, "train.eval_every": 1000, "train.checkpoint_every": 1000,
          "train.log_every": 5, "train.bleu_examples": 2, **extra}


def test_evaluations_counts_the_periodic_ones_and_the_last_step():
  assert budget_lib.evaluations(13, 628, 200) == 4  # 200, 400, 600 and the last step, 628.
  assert budget_lib.evaluations(13, 600, 200) == 3  # the last step is a periodic one: counted once.
  assert budget_lib.evaluations(1, 200, 200) == 1
  assert budget_lib.evaluations(201, 200, 200) == 0  # no steps.


def test_plan_is_the_most_steps_that_fit_the_budget():
  # The demo on this machine kind: 15 minutes, 17 s spent on the 12 planning steps (evaluation included), then
  # 1.4 s per step and 5 s per evaluation every 200 steps. 628 steps: 616 x 1.4 + 4 x 5 = 882.4 s <= 883 s left;
  # 629 would take 883.8 s.
  plan = dict(budget_seconds=900.0, spent_seconds=17.0, done_steps=12, step_seconds=1.4, eval_seconds=5.0,
              eval_every=200, min_steps=24)
  assert budget_lib.plan_steps(**plan) == 628
  # Without evaluations the same time holds floor(883 / 1.4) = 630 more steps (630.7 rounds down).
  assert budget_lib.plan_steps(**{**plan, "eval_seconds": 0.0}) == 642
  # An evaluation every step costs as much as the step: 883 / 2.8 = 315.4 -> 315 more.
  assert budget_lib.plan_steps(**{**plan, "eval_every": 1, "eval_seconds": 1.4}) == 327
  # A step twice as fast: 1223 steps, 1211 x 0.7 + 7 x 5 (200, ..., 1200 and the last) = 882.7 s; 1224: 883.4 s.
  assert budget_lib.plan_steps(**{**plan, "step_seconds": 0.7}) == 1223


def test_plan_counts_time_already_spent_and_refuses_a_budget_too_small():
  # Exactly fitting counts: 10 s budget, 5 s spent, 6 more steps of 0.5 s and evaluations at 15 and 18 of 1 s = 5 s.
  plan = dict(budget_seconds=10.0, spent_seconds=5.0, done_steps=12, step_seconds=0.5, eval_seconds=1.0,
              eval_every=5, min_steps=18)
  assert budget_lib.plan_steps(**plan) == 18
  with pytest.raises(budget_lib.BudgetTooSmallError,
                     match=r"train.budget_minutes=0.166667 leaves time for 18 steps \(5.0s spent on 12 steps, then "
                           r"0.500s per step and 1.0s per evaluation\), fewer than the 24 a budgeted run needs; give "
                           r"train.budget_minutes >= 0.3 or use train.steps"):
    budget_lib.plan_steps(**{**plan, "min_steps": 24})
  # Over budget already: no step fits.
  with pytest.raises(budget_lib.BudgetTooSmallError, match="leaves time for 12 steps"):
    budget_lib.plan_steps(**{**plan, "spent_seconds": 11.0})
  with pytest.raises(ValueError, match="step time must be positive, got 0.0"):
    budget_lib.plan_steps(**{**plan, "step_seconds": 0.0})


def test_second_plan_comes_before_the_cooldown_of_a_machine_10_percent_slower():
  # The demo's first plan: 1,599 steps at step 187, the last 20% (320 steps) cooling down from step 1,280.
  assert budget_lib.replan_step(187, 1599, 0.2) == 187 + math.floor(0.85 * (1279 - 187)) == 1115
  for first in (100, 1599, 20_000):
    for plan_step in (30, first // 10):
      slower = math.floor(0.9 * first)  # the steps a machine 10% slower than first timed can do.
      assert plan_step < budget_lib.replan_step(plan_step, first, 0.2) < slower - round(0.2 * slower) + 1
  assert budget_lib.replan_step(187, 1599, 0.0) == 187 + math.floor(0.85 * (1599 - 187))  # no cool-down: its end.
  assert budget_lib.replan_step(60, 120, 0.5) == 61  # the cool-down begins where measuring may end: at once.


def test_budget_config_is_validated(repo_root, tiny_corpus):
  with pytest.raises(ValueError, match=r"train.budget_minutes=-1.0 must be at least 0"):
    load(repo_root, tiny_corpus, **{"train.budget_minutes": -1})
  with pytest.raises(ValueError, match=r"train.bleu_every=100 decodes during training, which a time budget cannot "
                                       r"plan for \(train.budget_minutes=15\); set train.bleu_every=0"):
    load(repo_root, tiny_corpus, **{"train.budget_minutes": 15, "train.bleu_every": 100})
  with pytest.raises(ValueError, match=r"optimizer.cooldown_fraction=0.6 is not in \[0, 0.5\]: the cool-down must "
                                       r"start after a time budget's planning steps \(0 = off\)"):
    load(repo_root, tiny_corpus, **{"optimizer.cooldown_fraction": 0.6})
  config = load(repo_root, tiny_corpus, **{"train.budget_minutes": "15"})  # typed on a command line: a float.
  assert config.train.budget_minutes == 15.0 and isinstance(config.train.budget_minutes, float)


def test_sweep_point_with_a_budget_is_done_at_its_planned_steps(tmp_path):
  from launch import runs

  workdir = tmp_path / "point"
  workdir.mkdir()
  (workdir / runs.RESULTS).write_text(json.dumps({"step": 214, "planned_steps": 214, "budget_minutes": 0.1}))
  assert runs.status(str(workdir), 100_000) == runs.DONE  # train.steps (its default) is not what it trained to.
  (workdir / runs.RESULTS).write_text(json.dumps({"step": 213, "planned_steps": 214, "budget_minutes": 0.1}))
  assert runs.status(str(workdir), 6) != runs.DONE


def final_params(workdir):
  with checkpoint.Checkpointer(workdir / "checkpoints", read_only=True) as ckpt:
    return ckpt.latest_step(), ckpt.restore_params()


@pytest.mark.integration
def test_budget_too_small_stops_after_measuring_and_stores_no_plan(repo_root, tiny_corpus, tmp_path, capsys):
  config = load(repo_root, tiny_corpus, **budget_overrides(**{"train.budget_minutes": 0.0001}))
  with pytest.raises(budget_lib.BudgetTooSmallError,
                     match=rf"train.budget_minutes=0.0001 leaves time for {PLAN_STEP} steps \(\d+\.\ds spent on "
                           rf"{PLAN_STEP} steps, "
                           rf"then \d\.\d{{3}}s per step and \d+\.\ds per evaluation\), fewer than the "
                           rf"{budget_lib.MIN_STEPS} a budgeted run "
                           r"needs; give train.budget_minutes >= \d"):
    train_and_evaluate(config, tmp_path)
  out = capsys.readouterr().out
  assert "step     10/? |" in out and "ETA --" in out  # before the plan: no total, no ETA.
  assert f"eval step {PLAN_STEP}: loss" in out  # the timed evaluation.
  assert not (tmp_path / "budget.json").exists() and not list((tmp_path / "checkpoints").glob("*"))


@pytest.mark.slow
def test_cooldown_of_a_budget_run_ends_at_the_plan_like_a_run_of_that_many_steps(repo_root, tiny_corpus, tmp_path,
                                                                                     capsys):
  cooldown = {"optimizer.cooldown_fraction": 0.25, "train.budget_minutes": 0.5}  # compiling twice takes ~15 s.
  budgeted = train_and_evaluate(load(repo_root, tiny_corpus, **budget_overrides(**cooldown)), tmp_path / "budget")
  out = capsys.readouterr().out
  match = re.search(r"per evaluation \(every 1000 steps and at the end\), (\d+\.\d)s to compile the cool-down "
                    r"schedule -> (\d+) steps planned .* planned again at step (\d+)\)", out)
  replan = REPLAN_LINE.search(out)
  assert match and replan, out[-3000:]
  first, replan_step, planned = int(match.group(2)), int(match.group(3)), int(replan.group(4))
  assert 0 < float(match.group(1)) < 60 and int(replan.group(5)) == first
  # Planned again before the first plan's cool-down (the last quarter): one compilation after it.
  assert int(replan.group(1)) == int(replan.group(3)) == replan_step < first - round(0.25 * first)
  # Before its own cool-down too unless the machine slowed down by more than the plan's margin (about 15%) between
  # the two plans, as a CI machine busy with other tests can: then the log says the cool-down begins late.
  on_time = replan_step <= planned - round(0.25 * planned)  # its cool-down begins after step planned - C.
  assert on_time == ("should have begun" not in out), out[-3000:]
  assert budgeted["step"] == budgeted["planned_steps"] == planned
  stored = json.loads((tmp_path / "budget" / "budget.json").read_text())
  assert (stored["planned_steps"], stored["first_planned_steps"], stored["replanned_at_step"]) == (
      planned, first, replan_step)
  assert stored["step_seconds"] == pytest.approx(float(replan.group(2)), abs=1e-4)
  last_rate = float(re.search(rf"^step {planned:>6}/{planned} \| .* \| lr (\S+) \|", out, re.M).group(1))
  eq3 = 32**-0.5 * min(planned**-0.5, planned * 10**-1.5)  # tiny model: d_model 32.
  assert last_rate == pytest.approx(eq3 / round(0.25 * planned), rel=5e-3)  # the ramp's last factor, 1/C.
  if not on_time:  # a late cool-down is shorter than that of a run of `planned` steps: nothing to compare with.
    pytest.skip(f"re-planned at step {replan_step}, inside the cool-down of {planned} steps (the machine slowed "
                f"down); the comparison with train.steps={planned} needs a re-plan before it")

  # The same parameters as train.steps=<planned> with the cool-down known from the start.
  steps = train_and_evaluate(load(repo_root, tiny_corpus, **budget_overrides(**{
      **cooldown, "train.budget_minutes": 0.0, "train.steps": planned})), tmp_path / "steps")
  assert steps["step"] == planned
  for a, b in zip(jax.tree.leaves(final_params(tmp_path / "budget")[1]),
                  jax.tree.leaves(final_params(tmp_path / "steps")[1]), strict=True):
    np.testing.assert_allclose(a, b, atol=1e-6)


def train_command(corpus, workdir, **extra) -> list[str]:
  overrides = tiny_overrides(corpus, **budget_overrides(**extra))
  return [sys.executable, "-m", "jformer.main", "train", "--config=configs/small.py", f"--workdir={workdir}",
          *(f"--config.{k}={v}" for k, v in overrides.items())]


@pytest.mark.slow
def test_cli_budget_run_plans_trains_exactly_the_plan_and_resumes_to_it_after_sigterm(repo_root, tiny_corpus,
                                                                                      tmp_path):
  workdir = tmp_path / "budget"
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  process = subprocess.Popen(train_command(tiny_corpus, workdir), cwd=repo_root, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  seen, plan_step, signalled = [], None, None
  for line in process.stdout:  # preempt once the plan is made and training goes on.
    seen.append(line)
    if match := PLAN_LINE.match(line):
      plan_step = int(match.group(2))
    if plan_step and (step := re.match(r"^step +(\d+)/", line)) and int(step.group(1)) >= plan_step + 5:
      signalled = int(step.group(1))
      process.send_signal(signal.SIGTERM)
      break
  out = "".join(seen) + process.communicate(timeout=300)[0]
  assert process.returncode == 0, out[-3000:]
  match = PLAN_LINE.search(out)
  assert match, out[-3000:]
  plan_step, planned = int(match.group(2)), int(match.group(4))
  saved = int(out.split("preempted: saved step ")[1].split()[0])
  # The timed window: a tenth of the 6 s budget, and at least MEASURE_STEPS steps.
  assert PLAN_STEP <= plan_step and 2 * plan_step <= planned, out[-3000:]
  assert budget_lib.MIN_STEPS <= planned and plan_step + 5 <= saved < planned, out[-3000:]
  assert "step     10/? |" in out, out[-3000:]
  assert re.search(rf"^step {signalled:>6}/{planned} \| .* \| ETA \d+m\d\ds$", out, re.M), out[-3000:]
  assert f"eval step {plan_step}: loss" in out  # the timed evaluation of the plan.
  stored = json.loads((workdir / "budget.json").read_text())
  assert stored["planned_steps"] == planned and stored["budget_minutes"] == 0.1
  assert stored["planned_at_step"] == plan_step and stored["measured_steps"] == plan_step - budget_lib.WARMUP_STEPS
  assert plan_step + 5 < stored["replan_at_step"] < planned and "first_planned_steps" not in stored
  assert stored["step_seconds"] == pytest.approx(float(match.group(1)), abs=1e-4)

  started = time.perf_counter()  # before the rerun exists: its budget clock starts later and stops before it ends.
  rerun = subprocess.run(train_command(tiny_corpus, workdir), cwd=repo_root, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
  rerun_seconds = time.perf_counter() - started
  out = rerun.stdout
  assert rerun.returncode == 0, out[-3000:]
  assert f"resumed from step {saved}" in out and f"budget: {planned} steps planned for 0.1 minutes" in out
  assert not PLAN_LINE.search(out) and not REPLAN_LINE.search(out)  # stopped before the second plan: the first one.
  assert f"step {planned:>6}/{planned} |" in out and f"eval step {planned}: loss" in out
  assert final_params(workdir)[0] == planned  # exactly the plan, no step more.
  results = json.loads((workdir / "results.json").read_text())
  assert results["step"] == results["planned_steps"] == planned and results["budget_minutes"] == 0.1
  assert results["budget_step_seconds"] == stored["step_seconds"]
  # Counted from this process's resume (the first run's seconds are in budget.json, not here): an interval inside
  # the rerun's life, so no longer than the test saw it live, on a machine of any speed or load.
  assert 0 < results["budget_wall_seconds"] < rerun_seconds, (results, rerun_seconds)

  # Another budget on this workdir is refused before anything is written.
  refused = subprocess.run(train_command(tiny_corpus, workdir, **{"train.budget_minutes": 0.2}), cwd=repo_root,
                           env=env, capture_output=True, text=True, timeout=600)
  assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
  assert re.search(r"budget.json holds the plan of train.budget_minutes=0.1 \(\d+ steps\), not 0.2: resume with "
                   r"train.budget_minutes=0.1, or with train.budget_minutes=0 and train.steps=N", refused.stderr)
  assert json.loads((workdir / "config.json").read_text())["train"]["budget_minutes"] == 0.1

  # Reproducible from the logged number: train.steps=<planned> without a budget gives the same parameters (run as a
  # command too: the test process compiles with other XLA flags, tests/conftest.py).
  steps = tmp_path / "steps"
  subprocess.run(train_command(tiny_corpus, steps, **{"train.budget_minutes": 0.0, "train.steps": planned}),
                 cwd=repo_root, env=env, check=True, capture_output=True, timeout=600)
  plain = json.loads((steps / "results.json").read_text())
  assert plain["step"] == planned and "planned_steps" not in plain and not (steps / "budget.json").exists()
  for a, b in zip(jax.tree.leaves(final_params(workdir)[1]), jax.tree.leaves(final_params(steps)[1]), strict=True):
    np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.slow
def test_two_processes_train_the_steps_process_0_planned(repo_root, tiny_corpus, tmp_path):
  # 12 s: two processes on 2 cores step slower than one (6 s left 53 steps with 8% held back, under the 60 needed).
  overrides = prepared_overrides(repo_root, tiny_corpus, tmp_path, **budget_overrides(**{"train.budget_minutes": 0.2}))
  chief, other = finish(start_two_processes(repo_root, tmp_path / "run", overrides))
  match, replan = PLAN_LINE.search(chief), REPLAN_LINE.search(chief)
  assert match and replan and "Traceback" not in other, chief[-3000:]
  planned = int(replan.group(4))  # the second plan, from process 0's times.
  assert int(replan.group(5)) == int(match.group(4))
  assert f"step {planned:>6}/{planned} |" in chief
  step_dir = tmp_path / "run" / "checkpoints" / str(planned)  # both processes saved the planned last step.
  assert sorted(p.name for p in (step_dir / "data").glob("process_*.json")) == ["process_0-of-2.json",
                                                                               "process_1-of-2.json"]
  with checkpoint.Checkpointer(tmp_path / "run" / "checkpoints", read_only=True) as ckpt:
    assert ckpt.all_steps() == [planned]
