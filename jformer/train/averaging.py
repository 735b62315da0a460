"""Checkpoint averaging at the end of a run (paper Sec. 6.1), used for the final test only where it helps on the
valid split: which checkpoints (`window`, or the last saved) and the choice (`choose`). Behaviour in full:
docs/training.md (checkpoint averaging).
"""

from __future__ import annotations

from typing import Any, Callable

from jformer import checkpoint
from jformer.config.schema import TrainSection
from jformer.parallel import say


def window(total_steps: int, count: int, span: float) -> tuple[int, ...]:
  """The steps of the `count` averaged checkpoints: evenly spaced over the last `span` of `total_steps`, the last at
  `total_steps`, rounded to whole steps (fewer when the span holds fewer steps), e.g. window(1000, 5, 0.1) =
  (900, 925, 950, 975, 1000)."""
  first = max(total_steps - round(span * total_steps), 1)
  return tuple(sorted({round(first + k * (total_steps - first) / (count - 1)) for k in range(count)}))


def averaged_steps(train: TrainSection, total_steps: int, saved: list[int]) -> list[int]:
  """The saved steps to average: those of `window` that were saved (a run whose plan moved its window after some of
  its steps passed keeps fewer), or without a span the last `train.average_checkpoints` saved."""
  if train.average_span:
    return [step for step in window(total_steps, train.average_checkpoints, train.average_span) if step in saved]
  return saved[-train.average_checkpoints:]


def choose(train: TrainSection, workdir, total_steps: int, final_params: Any, final_loss: float,
           evaluate: Callable[[Any], dict]) -> tuple[Any, dict]:
  """(the parameters to test, results.json entries): the mean of `averaged_steps` where its valid loss
  (`evaluate(params)["loss"]`) is no higher than `final_loss` (the last step's), else `final_params`."""
  directory = checkpoint.checkpoints_dir(workdir)
  with checkpoint.Checkpointer(directory, read_only=True) as saved:
    steps = averaged_steps(train, total_steps, saved.all_steps())
  if len(steps) < 2:
    say(f"checkpoint averaging: {len(steps)} of the averaged checkpoints saved; testing the last step's parameters")
    return final_params, {"averaged_steps": steps, "tested_params": "final"}
  mean, steps = checkpoint.average_params(directory, steps=steps)
  loss = float(evaluate(mean)["loss"])
  chosen = loss <= final_loss
  say(f"checkpoint averaging: the mean of steps {', '.join(map(str, steps))} has valid loss {loss:.4f}, the last "
      f"step {final_loss:.4f} -> the final test uses {'the mean' if chosen else 'the last step'}")
  if chosen:
    checkpoint.save_params(checkpoint.averaged_dir(workdir), mean, overwrite=True)
  return (mean if chosen else final_params), {
      "averaged_steps": [int(s) for s in steps], "averaged_eval_loss": loss, "final_eval_loss": float(final_loss),
      "tested_params": "averaged" if chosen else "final"}
