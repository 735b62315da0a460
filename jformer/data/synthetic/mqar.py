"""Multi-query associative recall, MQAR (Arora, Eyuboglu et al. 2023, "Zoology: Measuring and improving recall in
efficient language models", Section 3; the generator `_mqar` of HazyResearch/zoology's
`zoology/data/associative_recall.py`): key-value pairs, then each key asked again, answered by its value.

Task tokens (ids FIRST_ID = 3 onwards, `vocab_size` of them): task token 0 is the blank; the keys are task tokens
1 .. vocab_size // 2 - 1 and the values vocab_size // 2 .. vocab_size - 1, disjoint halves as in Zoology (whose
blank is id 0, here id 3).

The rule, for L = seq_len and n = num_kv_pairs:
  - positions 0 .. 2n - 1: n distinct keys, each followed by its value (n distinct values), keys and values drawn
    uniformly without replacement;
  - the rest holds S = (L - 2n) // 2 slots of two positions (slot g at 2n + 2g, 2n + 2g + 1); n distinct slots
    g_1 .. g_n are drawn without replacement with probability proportional to (g + 1) ** (power_a - 1), a power law
    in the gap g from the pairs (power_a = 0.01, Zoology's default, is steep; power_a = 1 is uniform);
  - the i-th key of the pairs is asked in slot g_i: the key at 2n + 2 g_i and its value, the answer, at
    2n + 2 g_i + 1; `answer_mask` is True at exactly these n positions;
  - every other position is a uniformly random task token (any of the vocab_size, keys and values included, as in
    Zoology) when random_non_queries, else the blank.

One departure from Zoology's code: the value is written into the sequence at the answer position (Zoology's input
has filler there and holds the value only as the label of the query position). In this format the model predicts
tokens[t] from tokens[:t], so the loss at the answer position is Zoology's loss at the query position. Zoology's
further asserts (seq_len even, vocab_size > seq_len) are not needed here and not made.
"""

from __future__ import annotations

import numbers

import numpy as np

from jformer.data.synthetic.common import FIRST_ID, Sizes, check_int, example_rng, task_example

BLANK = 0  # task token of the non-query positions when random_non_queries is False.


def sizes(*, vocab_size: int = 8192, seq_len: int = 64, num_kv_pairs: int = 4, power_a: float = 0.01,
          random_non_queries: bool = True) -> Sizes:
  """Sizes(seq_len, FIRST_ID + vocab_size) after checking the options (ValueError naming the option and its range):
  vocab_size >= 4, seq_len >= 4, 1 <= num_kv_pairs <= min(seq_len // 4, vocab_size // 2 - 1) (n slots among the
  (seq_len - 2n) // 2, n distinct keys among vocab_size // 2 - 1), power_a > 0, random_non_queries a bool."""
  vocab_size = check_int("mqar", "vocab_size", vocab_size, 4)
  seq_len = check_int("mqar", "seq_len", seq_len, 4)
  check_int("mqar", "num_kv_pairs", num_kv_pairs, 1, min(seq_len // 4, vocab_size // 2 - 1),
            f"num_kv_pairs <= seq_len // 4 = {seq_len // 4} and <= vocab_size // 2 - 1 = {vocab_size // 2 - 1}")
  if isinstance(power_a, bool) or not isinstance(power_a, numbers.Real) or not 0 < power_a < float("inf"):
    raise ValueError(f"mqar: power_a must be a finite number > 0, got {power_a!r}.")
  if not isinstance(random_non_queries, bool):
    raise ValueError(f"mqar: random_non_queries must be True or False, got {random_non_queries!r}.")
  return Sizes(seq_len, FIRST_ID + vocab_size)


def gap_probabilities(num_slots: int, power_a: float) -> np.ndarray:
  """float64 [num_slots]: Zoology's power law over the slots g = 0 .. num_slots - 1, proportional to
  (g + 1) ** (power_a - 1), summing to 1."""
  p = np.arange(1, num_slots + 1, dtype=np.float64) ** (power_a - 1)
  return p / p.sum()


def example(seed: int, index: int, *, vocab_size: int = 8192, seq_len: int = 64, num_kv_pairs: int = 4,
            power_a: float = 0.01, random_non_queries: bool = True) -> dict[str, np.ndarray]:
  """Example `index` of dataset `seed` (see the module docstring for the rule): `tokens` int32 [seq_len] and
  `answer_mask` bool [seq_len], True at the num_kv_pairs value positions of the queries."""
  sizes(vocab_size=vocab_size, seq_len=seq_len, num_kv_pairs=num_kv_pairs, power_a=power_a,
        random_non_queries=random_non_queries)
  rng, n = example_rng(seed, index), num_kv_pairs
  half = vocab_size // 2
  keys = rng.choice(np.arange(1, half), n, replace=False)
  values = rng.choice(np.arange(half, vocab_size), n, replace=False)
  slots = rng.choice((seq_len - 2 * n) // 2, n, replace=False, p=gap_probabilities((seq_len - 2 * n) // 2, power_a))
  if random_non_queries:
    tokens = rng.integers(0, vocab_size, seq_len)
  else:
    tokens = np.full(seq_len, BLANK)
  tokens[0:2 * n:2], tokens[1:2 * n:2] = keys, values
  tokens[2 * n + 2 * slots], tokens[2 * n + 2 * slots + 1] = keys, values
  answer_mask = np.zeros(seq_len, bool)
  answer_mask[2 * n + 2 * slots + 1] = True
  return task_example(FIRST_ID + tokens, answer_mask)
