"""The synthetic tasks (jformer.data.synthetic): each example read back by a brute-force reading of its task's rule,
the common format, determinism by (seed, index), the option ranges refused, and the distributions the rules draw
from (MQAR's power-law gaps, the spread of induction triggers and selective-copy positions)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jformer.data import synthetic
from jformer.data.synthetic import induction, listops, mqar, selective_copy

F = 3  # the first task token id: 0, 1, 2 are pad, eos, unk.

# Small options of each task, read back below; listops with short windows to keep the file fast.
OPTIONS = {
    "mqar": [dict(vocab_size=64, seq_len=64, num_kv_pairs=4), dict(vocab_size=10, seq_len=33, num_kv_pairs=4),
             dict(vocab_size=40, seq_len=48, num_kv_pairs=12, random_non_queries=False),
             dict(vocab_size=30, seq_len=32, num_kv_pairs=1, power_a=1.0)],
    "induction": [dict(vocab_size=16, seq_len=64), dict(vocab_size=2, seq_len=4), dict(vocab_size=5, seq_len=9)],
    "selective_copy": [dict(vocab_size=16, seq_len=128, num_tokens=16), dict(vocab_size=3, seq_len=7, num_tokens=3),
                       dict(vocab_size=8, seq_len=40, num_tokens=1)],
    "listops": [dict(min_length=20, max_length=64), dict(max_depth=3, max_args=4, min_length=0, max_length=12),
                dict(max_depth=1, min_length=0, max_length=2)],
}
CASES = [(task, options) for task, option_list in OPTIONS.items() for options in option_list]
SEEDS, INDICES = (0, 1, 7), range(40)


def _read_mqar(tokens, mask, vocab_size, num_kv_pairs, random_non_queries=True, **_):
  """Checks one MQAR example by the rule: the pairs first (keys and values from disjoint halves), then each key asked
  once, its value next to it, the answer. Returns the query slots (gaps from the pairs)."""
  n, half = num_kv_pairs, vocab_size // 2
  keys, values = tokens[0:2 * n:2], tokens[1:2 * n:2]
  assert len(set(keys)) == n and all(F + 1 <= k < F + half for k in keys)
  assert len(set(values)) == n and all(F + half <= v < F + vocab_size for v in values)
  answers = np.flatnonzero(mask)
  asked = []
  for t in answers:
    assert t >= 2 * n + 1 and (t - 2 * n) % 2 == 1
    query = tokens[t - 1]
    pair = next(j for j in range(0, t - 1, 2) if tokens[j] == query)  # its pair in the prefix
    assert pair < 2 * n and tokens[t] == tokens[pair + 1]
    asked.append(query)
  assert sorted(asked) == sorted(keys)
  if random_non_queries:
    assert tokens.min() >= F and tokens.max() < F + vocab_size
  else:
    others = np.ones(len(tokens), bool)
    others[:2 * n] = others[answers] = others[answers - 1] = False
    assert (tokens[others] == F).all()  # the blank
  return (answers - 1 - 2 * n) // 2


def _read_induction(tokens, mask, vocab_size, seq_len, **_):
  """Checks one induction example: the trigger (id 3) exactly twice, the second at L - 2, and the answer at L - 1
  equal to the token after the first. Returns the first trigger's position."""
  first, second = np.flatnonzero(tokens == F)
  assert second == seq_len - 2 and first <= seq_len - 4
  assert tokens[-1] == tokens[first + 1]
  assert np.flatnonzero(mask).tolist() == [seq_len - 1]
  assert tokens.min() >= F and tokens.max() < F + vocab_size
  return first


def _read_selective_copy(tokens, mask, vocab_size, seq_len, num_tokens, **_):
  """Checks one selective-copy example: blanks and num_tokens data tokens, one delimiter, then the data tokens in
  order, the answers. Returns the data positions."""
  delimiter = F + vocab_size - 1
  (at,) = np.flatnonzero(tokens == delimiter)
  assert at == seq_len - num_tokens - 1
  context = tokens[:at]
  positions = np.flatnonzero(context != F)
  assert len(positions) == num_tokens and all(F + 1 <= d < delimiter for d in context[positions])
  assert context[positions].tolist() == tokens[at + 1:].tolist()
  assert np.flatnonzero(mask).tolist() == list(range(at + 1, seq_len))
  return positions


def _median_down(args):
  ordered, half = sorted(args), len(args) // 2
  return ordered[half] if len(args) % 2 else (ordered[half - 1] + ordered[half]) // 2


OPS = {"[MIN": min, "[MAX": max, "[MED": _median_down, "[SM": lambda args: sum(args) % 10}


def _parse(words, i, depth, max_depth, max_args, arg_counts):
  """Parses the expression starting at words[i] recursively: (its value, the index after it)."""
  assert depth <= max_depth
  if words[i].isdigit():
    return int(words[i]), i + 1
  op, args, i = OPS[words[i]], [], i + 1
  while words[i] != "]":
    value, i = _parse(words, i, depth + 1, max_depth, max_args, arg_counts)
    args.append(value)
  assert 2 <= len(args) <= max_args
  arg_counts.append(len(args))
  return op(args), i + 1


def _read_listops(tokens, mask, max_depth=10, max_args=10, min_length=500, max_length=2000, arg_counts=None):
  """Checks one ListOps example: LRA-spelled tokens parsed and evaluated recursively, the value right after the
  expression, then padding. Returns the expression's length."""
  (n,) = np.flatnonzero(mask)
  assert min_length < n < max_length and (tokens[n + 1:] == 0).all()
  names = [str(d) for d in range(10)] + ["[MIN", "[MAX", "[MED", "[SM", "]"]
  words = [names[t - F] for t in tokens[:n]]
  value, end = _parse(words, 0, 1, max_depth, max_args, [] if arg_counts is None else arg_counts)
  assert end == n and tokens[n] == F + value
  return n


READERS = {"mqar": _read_mqar, "induction": _read_induction, "selective_copy": _read_selective_copy,
           "listops": _read_listops}


@pytest.mark.parametrize("task,options", CASES)
def test_examples_follow_the_rule(task, options):
  """Every example of many (seed, index) is read back by its task's rule, with the format's shapes and dtypes."""
  sizes = synthetic.sizes(task, **options)
  full = dict(synthetic.SIZES[task].__kwdefaults__, **options)
  for seed, index in itertools.product(SEEDS, INDICES):
    example = synthetic.TASKS[task](seed, index, **options)
    tokens, mask = example["tokens"], example["answer_mask"]
    assert tokens.dtype == np.int32 and mask.dtype == bool and tokens.shape == mask.shape == (sizes.seq_len,)
    assert tokens.max() < sizes.vocab_size and not np.isin(tokens, (1, 2)).any()
    length = np.count_nonzero(tokens)
    assert (tokens[:length] >= F).all() and mask[:length].any() and not mask[length:].any()  # 0 pads the end only
    READERS[task](tokens, mask, **full)


@pytest.mark.parametrize("task", OPTIONS)
def test_defaults_follow_the_rule(task):
  """The papers' defaults (Zoology, Mamba, LRA's 500 < n < 2000) give examples of their sizes, read by the rule."""
  sizes = synthetic.sizes(task)
  batch = synthetic.examples(task, 3, range(4))
  assert batch["tokens"].shape == batch["answer_mask"].shape == (4, sizes.seq_len)
  for tokens, mask in zip(batch["tokens"], batch["answer_mask"]):
    READERS[task](tokens, mask, **synthetic.SIZES[task].__kwdefaults__)


def test_sizes_of_the_defaults():
  assert synthetic.sizes("mqar") == (64, 3 + 8192)
  assert synthetic.sizes("induction") == (256, 3 + 16)
  assert synthetic.sizes("selective_copy", seq_len=100) == (100, 3 + 16)
  assert synthetic.sizes("listops", max_length=2048) == (2048, 3 + 15)


@pytest.mark.parametrize("task,options", [(task, option_list[0]) for task, option_list in OPTIONS.items()])
def test_deterministic_by_seed_and_index(task, options):
  """The same (seed, index) gives the same example; another index or seed another; `examples` stacks exactly the
  examples of its indices, in any order (a dataset resumes or shards by index)."""
  make = synthetic.TASKS[task]
  a, b = make(5, 11, **options), make(5, 11, **options)
  assert all(np.array_equal(a[k], b[k]) for k in ("tokens", "answer_mask"))
  assert not np.array_equal(a["tokens"], make(5, 12, **options)["tokens"])
  assert not np.array_equal(a["tokens"], make(6, 11, **options)["tokens"])
  assert not np.array_equal(make(6, 12, **options)["tokens"], make(7, 11, **options)["tokens"])  # not seed + index
  indices = [9, 2, 11, 0]
  batch = synthetic.examples(task, 5, indices, **options)
  for row, index in enumerate(indices):
    example = make(5, index, **options)
    assert np.array_equal(batch["tokens"][row], example["tokens"])
    assert np.array_equal(batch["answer_mask"][row], example["answer_mask"])


@pytest.mark.parametrize("task,options,message", [
    ("mqar", dict(seq_len=64, num_kv_pairs=17), r"num_kv_pairs=17 is out of range; allowed \[1, 16\]"),
    ("mqar", dict(vocab_size=12, num_kv_pairs=6), r"num_kv_pairs=6 is out of range; allowed \[1, 5\]"),
    ("mqar", dict(num_kv_pairs=0), r"num_kv_pairs=0 is out of range; allowed \[1, 16\]"),
    ("mqar", dict(vocab_size=3), r"vocab_size=3 is out of range; allowed >= 4"),
    ("mqar", dict(seq_len=3), r"seq_len=3 is out of range; allowed >= 4"),
    ("mqar", dict(power_a=0.0), r"power_a must be a finite number > 0"),
    ("mqar", dict(random_non_queries=1), r"random_non_queries must be True or False"),
    ("induction", dict(vocab_size=1), r"vocab_size=1 is out of range; allowed >= 2"),
    ("induction", dict(seq_len=3), r"seq_len=3 is out of range; allowed >= 4"),
    ("induction", dict(seq_len=64.0), r"seq_len must be an integer >= 4"),
    ("selective_copy", dict(num_tokens=16, seq_len=32), r"seq_len=32 is out of range; allowed >= 33"),
    ("selective_copy", dict(vocab_size=2), r"vocab_size=2 is out of range; allowed >= 3"),
    ("selective_copy", dict(num_tokens=0), r"num_tokens=0 is out of range; allowed >= 1"),
    ("listops", dict(max_args=1), r"max_args=1 is out of range; allowed >= 2"),
    ("listops", dict(max_depth=0), r"max_depth=0 is out of range; allowed >= 1"),
    ("listops", dict(min_length=-1), r"min_length=-1 is out of range; allowed \[0, "),
    ("listops", dict(max_depth=2, max_args=3, min_length=5), r"min_length=5 is out of range; allowed \[0, 4\]"),
    ("listops", dict(min_length=10, max_length=11), r"max_length=11 is out of range; allowed >= 12"),
])
def test_options_out_of_range_are_refused(task, options, message):
  """An option out of its range is refused, by `sizes` and by the generator, naming the option and its range."""
  with pytest.raises(ValueError, match=f"{task}: {message}"):
    synthetic.sizes(task, **options)
  with pytest.raises(ValueError, match=f"{task}: {message}"):
    synthetic.TASKS[task](0, 0, **options)


def test_example_generator_is_default_rng_of_seed_and_index():
  """Example `index` of dataset `seed` draws from `np.random.default_rng([seed, index])`, the documented stream."""
  from jformer.data.synthetic.common import example_rng

  assert np.array_equal(example_rng(5, 11).random(8), np.random.default_rng([5, 11]).random(8))


def test_bad_task_seed_and_index_are_refused():
  with pytest.raises(ValueError, match=r"unknown synthetic task 'copy'; use one of \['induction', 'listops'"):
    synthetic.examples("copy", 0, range(2))
  with pytest.raises(ValueError, match=r"seed must be an integer >= 0, got -1"):
    mqar.example(-1, 0)
  with pytest.raises(ValueError, match=r"index must be an integer >= 0, got 1.5"):
    induction.example(0, 1.5)


def test_listops_refuses_a_length_window_no_tree_fills():
  """Trees of depth 2 with 2 arguments have 1 or 4 tokens: none has 1 < n < 4, and the generator says so."""
  with pytest.raises(ValueError, match=r"listops: none of 100000 trees .* min_length=1 < n < max_length=4"):
    listops.example(0, 0, max_depth=2, max_args=2, min_length=1, max_length=4)


@pytest.mark.parametrize("power_a", [0.01, 0.3, 1.0])
def test_mqar_gaps_follow_the_power_law(power_a):
  """With one pair, the query's slot g is drawn with probability proportional to (g + 1) ** (power_a - 1): the
  empirical counts over 3000 examples pass a chi-square test (31 degrees of freedom: mean 31, sd 7.9) against it."""
  options = dict(vocab_size=16, seq_len=66, num_kv_pairs=1, power_a=power_a)
  gaps = [_read_mqar(e["tokens"], e["answer_mask"], **options)[0]
          for e in (mqar.example(2, i, **options) for i in range(3000))]
  expected = np.arange(1, 33) ** (power_a - 1.0)
  expected = 3000 * expected / expected.sum()
  chi2 = (((np.bincount(gaps, minlength=32) - expected) ** 2) / expected).sum()
  assert chi2 < 31 + 6 * 7.9


def test_mqar_gaps_decrease_with_several_pairs():
  """With 8 pairs and Zoology's power_a = 0.01, query slots are ever rarer further from the pairs: counts over
  8-slot bins strictly decrease, and the first bin holds over a third of the queries (a uniform draw: 8/56)."""
  options = dict(vocab_size=64, seq_len=128, num_kv_pairs=8)
  slots = np.concatenate([_read_mqar(e["tokens"], e["answer_mask"], **options)
                          for e in (mqar.example(4, i, **options) for i in range(800))])
  counts = np.bincount(slots // 8, minlength=7)
  assert (np.diff(counts) < 0).all(), counts
  assert counts[0] > len(slots) / 3, counts


def test_mqar_fill_is_any_task_token():
  """With random_non_queries, the positions outside the pairs and queries hold any task token (blank, keys and
  values, as Zoology's fill): over 100 examples of vocabulary 10 all 10 occur there, each 10% +- 3% of the time."""
  options = dict(vocab_size=10, seq_len=64, num_kv_pairs=2)
  fill = []
  for e in (mqar.example(6, i, **options) for i in range(100)):
    answers = np.flatnonzero(e["answer_mask"])
    others = np.ones(64, bool)
    others[:4] = others[answers] = others[answers - 1] = False
    fill.append(e["tokens"][others])
  shares = np.bincount(np.concatenate(fill) - F, minlength=10) / sum(map(len, fill))
  assert len(shares) == 10 and (np.abs(shares - 0.1) < 0.03).all(), shares


def test_induction_trigger_anywhere():
  """The first trigger is drawn uniformly from 0 .. L - 4: over 1000 examples of L = 10 each of the 7 positions
  holds it 1000/7 = 143 +- 45 times."""
  positions = [_read_induction(e["tokens"], e["answer_mask"], vocab_size=4, seq_len=10)
               for e in (induction.example(1, i, vocab_size=4, seq_len=10) for i in range(1000))]
  counts = np.bincount(positions, minlength=7)
  assert len(counts) == 7 and (np.abs(counts - 1000 / 7) < 45).all(), counts


def test_selective_copy_positions_spread():
  """Data positions are uniform over the context (not packed at its start, as in the plain copying task): over
  300 examples of 16 tokens in a context of 111, each quarter of it holds its share of the 4800 positions within
  100 (about 3 sd), and every context position is used."""
  options = dict(vocab_size=16, seq_len=128, num_tokens=16)
  positions = np.concatenate([_read_selective_copy(e["tokens"], e["answer_mask"], **options)
                              for e in (selective_copy.example(8, i, **options) for i in range(300))])
  quarters = np.bincount(positions * 4 // 111, minlength=4)
  expected = 4800 * np.bincount(np.arange(111) * 4 // 111) / 111
  assert (np.abs(quarters - expected) < 100).all(), quarters
  assert len(np.unique(positions)) == 111


def test_listops_draws_every_operator_arity_and_value():
  """Over 300 short expressions every operator, every argument count 2 .. max_args and every value 0 .. 9 occurs."""
  options = dict(max_depth=4, max_args=5, min_length=5, max_length=40)
  batch = synthetic.examples("listops", 9, range(300), **options)
  arg_counts = []
  for tokens, mask in zip(batch["tokens"], batch["answer_mask"]):
    _read_listops(tokens, mask, arg_counts=arg_counts, **options)
  assert set(arg_counts) == {2, 3, 4, 5}
  assert set(batch["tokens"][batch["answer_mask"]].tolist()) == set(range(F, F + 10))
  assert set(range(F + 10, F + 15)) <= set(batch["tokens"].ravel().tolist())


def test_listops_evaluate_matches_lra_semantics():
  """The module's evaluator on expressions whose values LRA's semantics fix (MED of an even count rounds down)."""
  t = {name: k for k, name in enumerate([str(d) for d in range(10)] + ["[MIN", "[MAX", "[MED", "[SM", "]"])}
  cases = {"[MED 2 7 ]": 4, "[MED 1 9 3 ]": 3, "[SM 9 8 7 ]": 4, "[MAX 2 [MIN 5 3 ] 1 ]": 3, "6": 6,
           "[MIN [SM 5 5 ] 4 ]": 0}
  for text, value in cases.items():
    assert listops.evaluate([t[w] for w in text.split()]) == value, text
