"""Induction heads (Olsson et al. 2022, "In-context Learning and Induction Heads": the [A][B] ... [A] -> [B]
mechanism), as the synthetic task of Fu, Dao et al. 2023 ("Hungry Hungry Hippos", Section 3.1;
`generate_induction_head` of HazyResearch/safari's `src/dataloaders/synthetics.py`), also used by Gu & Dao 2023
(Mamba, Section 4.1.2): random tokens in which a trigger token appears once; at the end the trigger comes again and
the answer is the token that followed its first occurrence.

Task tokens (ids FIRST_ID = 3 onwards, `vocab_size` of them): task token 0 is the trigger, task tokens
1 .. vocab_size - 1 the content.

The rule, for L = seq_len: positions 0 .. L - 3 are content tokens drawn uniformly with replacement; then the
trigger overwrites position p, drawn uniformly from 0 .. L - 4 (so p + 1 <= L - 3 holds a content token); position
L - 2 is the trigger again and position L - 1, the answer, repeats tokens[p + 1]. The trigger appears exactly twice
(at p and L - 2); `answer_mask` is True at L - 1 only.

As safari with induction_len = 1 and one trigger (its default), where input_seq_len = L - 2; safari draws p from
0 .. L - 5, so the follower never sits just before the final trigger; here it may.
"""

from __future__ import annotations

import numpy as np

from jformer.data.synthetic.common import FIRST_ID, Sizes, check_int, example_rng, task_example

TRIGGER = 0  # task token of the trigger (id FIRST_ID).


def sizes(*, vocab_size: int = 16, seq_len: int = 256) -> Sizes:
  """Sizes(seq_len, FIRST_ID + vocab_size) after checking the options (ValueError naming the option and its range):
  vocab_size >= 2 (the trigger and at least one content token), seq_len >= 4 (trigger, follower, trigger, answer).
  The defaults are Mamba's (vocabulary 16, training length 256)."""
  vocab_size = check_int("induction", "vocab_size", vocab_size, 2, why="the trigger and a content token")
  seq_len = check_int("induction", "seq_len", seq_len, 4, why="trigger, follower, trigger, answer")
  return Sizes(seq_len, FIRST_ID + vocab_size)


def example(seed: int, index: int, *, vocab_size: int = 16, seq_len: int = 256) -> dict[str, np.ndarray]:
  """Example `index` of dataset `seed` (see the module docstring for the rule): `tokens` int32 [seq_len] and
  `answer_mask` bool [seq_len], True at the last position only."""
  sizes(vocab_size=vocab_size, seq_len=seq_len)
  rng = example_rng(seed, index)
  tokens = np.empty(seq_len, np.int64)
  tokens[:seq_len - 2] = rng.integers(1, vocab_size, seq_len - 2)
  p = rng.integers(0, seq_len - 3)
  tokens[p] = tokens[seq_len - 2] = TRIGGER
  tokens[seq_len - 1] = tokens[p + 1]
  answer_mask = np.zeros(seq_len, bool)
  answer_mask[-1] = True
  return task_example(FIRST_ID + tokens, answer_mask)
