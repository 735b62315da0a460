"""The synthetic tasks as datasets of the registry (`data.dataset="mqar"`, ...): random-access splits of rows
generated from a seed, no files, and the fixed vocabulary of their token ids.

A split of a synthetic dataset of seed s is the examples 0, 1, 2, ... of the generator seed
`split_seed(s, split) = 3 s + (0 train, 1 valid, 2 test)`, so that every (seed, split) draws its own examples and a
split's example i depends on (s, split, i) only: a host reads examples shard_index::shard_count, and a grain
iterator over them resumes from its position alone. "train" holds TRAIN_EXAMPLES examples (never exhausted),
"valid" and "test" `eval_examples` each (an option, default EVAL_EXAMPLES).

A row is the example of `TASKS[task](seed, index, **options)` as a decoder-only batch row, each int32 [L]:
  targets               the example's token ids (0 = padding after a ListOps answer).
  targets_segmentation  1 on the example's tokens, 0 on padding.
  targets_position      0, 1, ..., L - 1 on the tokens, 0 on padding.
  targets_weights       1 at the answer positions (`answer_mask`), 0 elsewhere: the loss weights, so loss and
                        accuracy count only the answers.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Mapping, Sequence

import numpy as np

from jformer.data.synthetic import SIZES, TASKS, Sizes
from jformer.registry import first_line

ROW_KEYS = ("targets", "targets_segmentation", "targets_position", "targets_weights")
SPLIT_INDEX = {"train": 0, "valid": 1, "test": 2}
TRAIN_EXAMPLES = 2**40  # a training split no run reads to its end.
EVAL_EXAMPLES = 1000  # default examples of the valid and test splits (Zoology tests on 1,000 per configuration).


def split_seed(seed: int, split: str) -> int:
  """The generator seed of `split` of the dataset of seed `seed`: 3 seed + (0 train, 1 valid, 2 test)."""
  if split not in SPLIT_INDEX:
    raise ValueError(f"unknown split '{split}'; splits are {tuple(SPLIT_INDEX)}")
  return 3 * seed + SPLIT_INDEX[split]


def row(example: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """A generator's example (`tokens`, `answer_mask` [L]) as a batch row: the keys `ROW_KEYS`, each int32 [L]."""
  tokens = np.asarray(example["tokens"], np.int32)
  segmentation = (tokens != 0).astype(np.int32)
  return {"targets": tokens, "targets_segmentation": segmentation,
          "targets_position": np.arange(len(tokens), dtype=np.int32) * segmentation,
          "targets_weights": np.asarray(example["answer_mask"], np.int32)}


class SyntheticSource:
  """Random access to the rows (`row`) of one split: element i is example `indices[i]` of generator seed `seed`.

  Args:
    task: a name of `TASKS`.
    options: the generator's keyword options.
    seed: the generator seed (`split_seed`).
    indices: the examples this view holds, in order (`shard` makes one host's view).
  """

  def __init__(self, task: str, options: Mapping[str, Any], seed: int, indices: range):
    self.task, self.options, self.seed, self._indices = task, dict(options), seed, indices

  def __repr__(self) -> str:
    return f"SyntheticSource({self.task!r}, {self.options}, seed={self.seed}, indices={self._indices!r})"

  def __len__(self) -> int:
    return len(self._indices)

  def __getitem__(self, index: int) -> dict[str, np.ndarray]:
    return row(TASKS[self.task](self.seed, self._indices[index], **self.options))

  def shard(self, shard_index: int, shard_count: int) -> SyntheticSource:
    """Elements shard_index, shard_index + shard_count, ... of this view: one host's share."""
    if not 0 <= shard_index < shard_count:
      raise ValueError(f"shard_index={shard_index} is not in [0, shard_count={shard_count}).")
    view = copy.copy(self)
    view._indices = self._indices[shard_index::shard_count]
    return view

  @property
  def indices(self) -> range:
    """The generator indices of this view's examples."""
    return self._indices


class TaskVocabulary:
  """The fixed vocabulary of a synthetic task: token ids are the generator's own, nothing is trained or read.
  `decode` writes ids as numbers ('7 12 3'); `encode` reads them back."""

  def __init__(self, vocab_size: int):
    self.vocab_size = vocab_size

  def encode(self, text: str) -> list[int]:
    return [int(token) for token in text.split()]

  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    return " ".join(str(int(i)) for i in ids)

  def decode_batch(self, ids) -> list[str]:
    return [self.decode(row_ids) for row_ids in ids]


class SyntheticDataset:
  """The registry entry of a synthetic task: a loader `(name, split, *, path, data_dir, source_lang, target_lang,
  seed, **options) -> SyntheticSource` whose `options` are the generator's keyword options and `eval_examples`.

  Args:
    task: a name of `TASKS`.
  """

  def __init__(self, task: str):
    self.task = task
    title = first_line(inspect.getmodule(TASKS[task]).__doc__).split(" (")[0]  # e.g. "Induction heads"
    self.doc = f"synthetic task: {title}, generated from data.seed (options: data.dataset_options)"
    generator = inspect.signature(TASKS[task]).parameters.values()
    self.options = {p.name: p.default for p in generator if p.kind is p.KEYWORD_ONLY}
    self.options["eval_examples"] = EVAL_EXAMPLES

  def __repr__(self) -> str:
    return f"SyntheticDataset({self.task!r})"

  def generator_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
    """The options the generator takes (`options` without eval_examples)."""
    return {k: v for k, v in options.items() if k != "eval_examples"}

  def sizes(self, options: Mapping[str, Any]) -> Sizes:
    """`Sizes(seq_len, vocab_size)` of the task with `options`; a ValueError names an option out of its range."""
    return SIZES[self.task](**self.generator_options(options))

  def vocabulary(self, options: Mapping[str, Any]) -> TaskVocabulary:
    return TaskVocabulary(self.sizes(options).vocab_size)

  def __call__(self, name: str, split: str, *, path: str = "", data_dir: str | None = None, source_lang: str = "",
               target_lang: str = "", seed: int = 0, **options) -> SyntheticSource:
    del name, path, data_dir, source_lang, target_lang  # generated, monolingual.
    self.sizes(options)
    examples = TRAIN_EXAMPLES if split == "train" else options.get("eval_examples", EVAL_EXAMPLES)
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
      raise ValueError(f"{self.task}: eval_examples must be a positive int, got {examples!r} "
                       "(--config.data.dataset_options.eval_examples)")
    return SyntheticSource(self.task, self.generator_options(options), split_seed(seed, split), range(examples))
