"""Selective copying (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces", Section
4.1.1; the variable copying task of state-spaces/s4's `src/dataloaders/datasets/copying.py`, `torch_copying_data`
with variable=True): data tokens scattered at random positions among blank (noise) tokens, then reproduced in order.

Task tokens (ids FIRST_ID = 3 onwards, `vocab_size` of them): task token 0 is the blank, vocab_size - 1 the
delimiter, 1 .. vocab_size - 2 the data tokens (s4's layout: noise 0, marker A - 1, data 1 .. A - 2).

The rule, for L = seq_len and M = num_tokens: the context is positions 0 .. C - 1, C = L - M - 1; M distinct
positions of it, drawn uniformly without replacement, hold data tokens d_1 .. d_M (in position order) drawn
uniformly with replacement, every other context position the blank; position C is the delimiter; positions
C + 1 .. L - 1 are d_1 .. d_M again, the answers (`answer_mask` True there only).

One departure from s4's code: s4 follows the context with M marker tokens and reads the M outputs there, the
answers never being inputs; here one delimiter is followed by the answers themselves, so that a decoder-only model
predicts d_k from the context, the delimiter and d_1 .. d_(k - 1). The defaults are Mamba's (vocabulary 16,
16 data tokens, length 4096).
"""

from __future__ import annotations

import numpy as np

from jformer.data.synthetic.common import FIRST_ID, Sizes, check_int, example_rng, task_example

BLANK = 0  # task token of the noise.


def delimiter(vocab_size: int) -> int:
  """The task token of the delimiter: vocab_size - 1."""
  return vocab_size - 1


def sizes(*, vocab_size: int = 16, seq_len: int = 4096, num_tokens: int = 16) -> Sizes:
  """Sizes(seq_len, FIRST_ID + vocab_size) after checking the options (ValueError naming the option and its range):
  vocab_size >= 3 (blank, delimiter and a data token), num_tokens >= 1, seq_len >= 2 * num_tokens + 1 (a context
  of at least num_tokens positions, the delimiter, the num_tokens answers)."""
  vocab_size = check_int("selective_copy", "vocab_size", vocab_size, 3, why="blank, delimiter and a data token")
  num_tokens = check_int("selective_copy", "num_tokens", num_tokens, 1)
  seq_len = check_int("selective_copy", "seq_len", seq_len, 2 * num_tokens + 1,
                      why=f"a context of num_tokens={num_tokens} positions, the delimiter and the answers")
  return Sizes(seq_len, FIRST_ID + vocab_size)


def example(seed: int, index: int, *, vocab_size: int = 16, seq_len: int = 4096,
            num_tokens: int = 16) -> dict[str, np.ndarray]:
  """Example `index` of dataset `seed` (see the module docstring for the rule): `tokens` int32 [seq_len] and
  `answer_mask` bool [seq_len], True at the last num_tokens positions."""
  sizes(vocab_size=vocab_size, seq_len=seq_len, num_tokens=num_tokens)
  rng = example_rng(seed, index)
  context = seq_len - num_tokens - 1
  data = rng.integers(1, vocab_size - 1, num_tokens)
  positions = np.sort(rng.choice(context, num_tokens, replace=False))
  tokens = np.full(seq_len, BLANK)
  tokens[positions] = data
  tokens[context] = delimiter(vocab_size)
  tokens[context + 1:] = data
  answer_mask = np.zeros(seq_len, bool)
  answer_mask[context + 1:] = True
  return task_example(FIRST_ID + tokens, answer_mask)
