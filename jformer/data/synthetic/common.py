"""What the synthetic tasks share: the first task token id, the per-example generator, the example and size
records, and option checks whose errors name the option and its allowed range."""

from __future__ import annotations

import numbers
from typing import NamedTuple

import numpy as np

from jformer.ops.tokens import UNK_ID

FIRST_ID = UNK_ID + 1  # task token k is id FIRST_ID + k: ids 0, 1, 2 (pad, eos, unk) never appear in a task.


class Sizes(NamedTuple):
  """What a model needs for a task: `seq_len`, the length L of every example, and `vocab_size`, the embedding rows
  (FIRST_ID + the task's own tokens, so every id of an example is < vocab_size)."""
  seq_len: int
  vocab_size: int


def example_rng(seed: int, index: int) -> np.random.Generator:
  """The generator of example `index` of dataset `seed`: `np.random.default_rng([seed, index])`, so an example
  depends on (seed, index) only and a dataset is resumable and shardable by index."""
  for name, value in (("seed", seed), ("index", index)):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
      raise ValueError(f"{name} must be an integer >= 0, got {value!r}.")
  return np.random.default_rng([int(seed), int(index)])


def check_int(task: str, name: str, value, low: int, high: int | None = None, why: str = "") -> int:
  """`value` as an int, or a ValueError naming `task`'s option `name` and its allowed range [low, high] (no upper
  bound where high is None; `why` says what sets the bounds)."""
  allowed = f"[{low}, {high}]" if high is not None else f">= {low}"
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise ValueError(f"{task}: {name} must be an integer {allowed}, got {value!r}.")
  if value < low or (high is not None and value > high):
    raise ValueError(f"{task}: {name}={value} is out of range; allowed {allowed}{f' ({why})' if why else ''}.")
  return int(value)


def task_example(tokens: np.ndarray, answer_mask: np.ndarray) -> dict[str, np.ndarray]:
  """The example record: `tokens` int32 [L] and `answer_mask` bool [L] (True where tokens[t] is an answer)."""
  return {"tokens": np.asarray(tokens, np.int32), "answer_mask": np.asarray(answer_mask, bool)}
