"""ListOps (Nangia & Bowman 2018; as generated for the Long Range Arena, Tay et al. 2020, by
google-research/long-range-arena's `lra_benchmarks/data/listops.py`): a bracketed expression of list operators over
the digits 0-9, then its value, a digit.

Task tokens (ids FIRST_ID = 3 onwards, 15 of them): task tokens 0 .. 9 the digits, 10 .. 13 the operators
[MIN, [MAX, [MED, [SM, 14 the closing bracket ]. [MED is the median rounded down (LRA's int(np.median)), [SM the sum
modulo 10.

The rule (LRA's `generate_tree` and its length filter): a node at depth d (the root at depth 1) is, when
d < max_depth, an operator with probability 1/4 (LRA's VALUE_P = 0.25), else, and always at d = max_depth, a digit
drawn uniformly; an operator, drawn uniformly from the four, takes a number of arguments drawn uniformly from
2 .. max_args, each a node at depth d + 1, and is written as its operator token, its arguments, then ]. Trees are
drawn until one has n tokens with min_length < n < max_length (both bounds exclusive, as in LRA). The example is
those n tokens, the value at position n (`answer_mask` True there only) and padding (id 0) up to max_length, so
every example has L = max_length. The defaults are LRA's (depth 10, 10 arguments, 500 < n < 2000).

Departures from LRA's data: LRA's files write the tree with parentheses around every application, which its
tokenizer then drops (with the brackets, until fixed: long-range-arena issue #14, where its authors confirm that the
brackets are needed); here there are no parentheses and the brackets stay. LRA also removes duplicate expressions
across its 100k examples, which a generator of independent examples cannot do. LRA's models read 2,000 tokens
(its config's max_length), the default here; max_length=2048 allows expressions of up to 2,046 tokens.
"""

from __future__ import annotations

import numpy as np

from jformer.data.synthetic.common import FIRST_ID, Sizes, check_int, example_rng, task_example

DIGITS = 10  # task tokens 0 .. 9: the digits, also the answers.
MIN, MAX, MED, SUM_MOD = range(DIGITS, DIGITS + 4)
OPERATORS = (MIN, MAX, MED, SUM_MOD)
END = DIGITS + len(OPERATORS)  # the closing bracket.
VOCAB_SIZE = END + 1
NAMES = [str(d) for d in range(DIGITS)] + ["[MIN", "[MAX", "[MED", "[SM", "]"]  # task token -> LRA's spelling.
OPERATOR_P = 0.25  # LRA's VALUE_P: a node above the last level is an operator with this probability.
MAX_ATTEMPTS = 100_000  # trees drawn before an example gives up on its length window.
APPLY = {MIN: min, MAX: max, MED: lambda args: int(np.median(args)), SUM_MOD: lambda args: sum(args) % 10}


def longest(max_depth: int, max_args: int) -> int:
  """Tokens of the longest tree: every node above depth max_depth an operator with max_args arguments."""
  n = 1
  for _ in range(max_depth - 1):
    n = 2 + max_args * n
  return n


def sizes(*, max_depth: int = 10, max_args: int = 10, min_length: int = 500, max_length: int = 2000) -> Sizes:
  """Sizes(max_length, FIRST_ID + 15) after checking the options (ValueError naming the option and its range):
  max_depth >= 1, max_args >= 2, 0 <= min_length < longest(max_depth, max_args) (some tree is longer than it),
  max_length >= min_length + 2 (room for one length between the exclusive bounds)."""
  max_depth = check_int("listops", "max_depth", max_depth, 1)
  max_args = check_int("listops", "max_args", max_args, 2)
  top = longest(max_depth, max_args)
  min_length = check_int("listops", "min_length", min_length, 0, top - 1,
                         f"the longest tree of max_depth={max_depth}, max_args={max_args} has {top} tokens")
  max_length = check_int("listops", "max_length", max_length, min_length + 2,
                         why=f"lengths n with min_length={min_length} < n < max_length")
  return Sizes(max_length, FIRST_ID + VOCAB_SIZE)


def evaluate(expression) -> int:
  """The value of an expression given as task tokens (a digit, or an operator, its arguments and END)."""
  stack = [[]]
  for token in expression:
    token = int(token)
    if token < DIGITS:
      stack[-1].append(token)
    elif token == END:
      op, *args = stack.pop()
      stack[-1].append(APPLY[op](args))
    else:
      stack.append([token])
  (value,) = stack.pop()
  return value


def _tree(uniform, max_depth: int, max_args: int, max_length: int) -> list[int] | None:
  """One tree's task tokens in writing order, drawn by the rule from `uniform()` floats in [0, 1); None as soon as
  it reaches max_length tokens (it would be rejected whole, so drawing the rest would only cost time)."""
  tokens, pending = [], [1]  # pending: depths of nodes still to draw, or 0 for a closing bracket.
  while pending:
    depth = pending.pop()
    if depth == 0:
      tokens.append(END)
    elif depth < max_depth and uniform() <= OPERATOR_P:
      num_args = 2 + int(uniform() * (max_args - 1))
      tokens.append(OPERATORS[int(uniform() * len(OPERATORS))])
      pending.append(0)
      pending.extend([depth + 1] * num_args)
    else:
      tokens.append(int(uniform() * DIGITS))
    if len(tokens) >= max_length:
      return None
  return tokens


def _uniforms(rng: np.random.Generator, chunk: int = 4096):
  """Floats in [0, 1) from `rng`, drawn `chunk` at a time (one draw per node would cost more than the tree)."""
  while True:
    yield from rng.random(chunk).tolist()


def example(seed: int, index: int, *, max_depth: int = 10, max_args: int = 10, min_length: int = 500,
            max_length: int = 2000) -> dict[str, np.ndarray]:
  """Example `index` of dataset `seed` (see the module docstring for the rule): `tokens` int32 [max_length] and
  `answer_mask` bool [max_length], True at the value's position only. A ValueError if MAX_ATTEMPTS trees all
  miss the length window (one that few or no trees of max_depth and max_args fall in)."""
  sizes(max_depth=max_depth, max_args=max_args, min_length=min_length, max_length=max_length)
  uniform = _uniforms(example_rng(seed, index)).__next__
  for _ in range(MAX_ATTEMPTS):
    expression = _tree(uniform, max_depth, max_args, max_length)
    if expression is not None and len(expression) > min_length:
      break
  else:
    raise ValueError(f"listops: none of {MAX_ATTEMPTS} trees of max_depth={max_depth}, max_args={max_args} has a "
                       f"length n with min_length={min_length} < n < max_length={max_length}; widen the window.")
  n = len(expression)
  tokens = np.zeros(max_length, np.int64)
  tokens[:n] = FIRST_ID + np.asarray(expression)
  tokens[n] = FIRST_ID + evaluate(expression)
  answer_mask = np.zeros(max_length, bool)
  answer_mask[n] = True
  return task_example(tokens, answer_mask)
