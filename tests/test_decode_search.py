"""Beam and greedy search against brute force on toy models whose whole state lives in the decoding cache."""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import EOS, StepModel, log_softmax
from jformer.decode import NEG_INF, beam_search, flat_batch_beam_expand, greedy_search, length_penalty
from jformer.decode import common


def lp(n, alpha):
  return ((5.0 + n) / 6.0) ** alpha


class PrefixModel:
  """Logits are a random function of the row and the whole generated prefix, which only the cache knows.

  The cache is like a decoder's: a row-wise token history `[N, L]` written at a shared scalar index, plus the
  row's batch element `[N]` (so wrong tiling or wrong beam gathering gives wrong logits).
  """

  def __init__(self, seed, batch, vocab, max_len, scale=2.0):
    self.batch, self.vocab, self.max_len = batch, vocab, max_len
    n_codes = sum(vocab**n for n in range(max_len))  # one per prefix of length 0 .. max_len - 1
    self.table = np.random.default_rng(seed).normal(size=(batch, n_codes, vocab)) * scale

  def init_cache(self):
    return {"history": jnp.zeros((self.batch, self.max_len), jnp.int32),
            "row": jnp.arange(self.batch, dtype=jnp.int32),
            "index": jnp.int32(0)}

  def step(self, ids, cache):
    index = cache["index"]
    history = cache["history"].at[:, index].set(ids[:, 0])  # position 0 holds BOS, position p token p
    positions = jnp.arange(self.max_len)
    weights = jnp.where((positions >= 1) & (positions <= index),
                        self.vocab ** jnp.clip(index - positions, 0, None), 0)
    code = jnp.sum((history + 1) * weights, axis=1)  # bijective base-V number of the prefix
    logits = jnp.asarray(self.table, jnp.float32)[cache["row"], code]
    return logits, {"history": history, "row": cache["row"], "index": index + 1}

  def np_log_probs(self, b, prefix):
    code = 0
    for t in prefix:
      code = code * self.vocab + t + 1
    return log_softmax(self.table[b, code])

  def score(self, b, seq, alpha, limit=None):
    """Length-penalised score of an EOS-ended sequence, with EOS forced at `limit` like the decoders."""
    logp = 0.0
    for n, t in enumerate(seq, start=1):
      lps = self.np_log_probs(b, seq[:n - 1])
      assert limit is None or n <= limit
      logp += lps[t]
    return logp / lp(len(seq), alpha)

  def all_finished(self, b, alpha, limit=None):
    """Every EOS-ended sequence of length <= max_len (and <= limit), with its score, best first."""
    out = []
    longest = self.max_len if limit is None else min(limit, self.max_len)
    for n in range(1, longest + 1):
      for body in itertools.product([t for t in range(self.vocab) if t != EOS], repeat=n - 1):
        seq = body + (EOS,)
        out.append((self.score(b, seq, alpha), seq))
    return sorted(out, key=lambda x: -x[0])

  def np_greedy(self, b, limit=None):
    seq = []
    while len(seq) < self.max_len:
      t = EOS if limit is not None and len(seq) + 1 >= limit else int(np.argmax(self.np_log_probs(b, seq)))
      seq.append(t)
      if t == EOS:
        break
    return tuple(seq)


def run_beam(model, max_lengths=None, **kwargs):
  fn = jax.jit(functools.partial(beam_search, model.step, batch_size=model.batch,
                                 max_decode_len=model.max_len, **kwargs))
  seqs, scores = fn(model.init_cache(), max_lengths=None if max_lengths is None else jnp.asarray(max_lengths))
  return np.asarray(seqs), np.asarray(scores)


def run_greedy(model, max_lengths=None):
  fn = jax.jit(functools.partial(greedy_search, model.step, batch_size=model.batch, max_decode_len=model.max_len))
  return np.asarray(fn(model.init_cache(), max_lengths=None if max_lengths is None else jnp.asarray(max_lengths)))


def unpad(seq):
  """The sequence up to and including its EOS; checks that only 0s follow."""
  seq = [int(t) for t in seq]
  if EOS not in seq:
    return tuple(seq)
  n = seq.index(EOS) + 1
  assert all(t == 0 for t in seq[n:]), seq
  return tuple(seq[:n])


def test_flat_batch_beam_expand_and_cache_tiling():
  x = jnp.arange(6).reshape(3, 2)
  np.testing.assert_array_equal(flat_batch_beam_expand(x, 2), [[0, 1], [0, 1], [2, 3], [2, 3], [4, 5], [4, 5]])
  cache = {"kv": jnp.arange(3)[:, None, None] * jnp.ones((3, 2, 4)), "index": jnp.int32(7)}
  tiled = common.expand_cache(cache, 2)
  assert tiled["index"].shape == () and int(tiled["index"]) == 7
  np.testing.assert_array_equal(tiled["kv"][:, 0, 0], [0, 0, 1, 1, 2, 2])
  gathered = common.gather_cache_rows(tiled, jnp.array([5, 0, 0, 3, 2, 1]))
  assert int(gathered["index"]) == 7
  np.testing.assert_array_equal(gathered["kv"][:, 1, 3], [2, 0, 0, 1, 1, 0])


def test_a_scanned_stacks_cache_rows_are_tiled_and_gathered_on_axis_1():
  """Under `layers` (a scanned stack: its layers on axis 0) rows are axis 1, and its per-layer counters are shared."""
  cache = {"layers": {"kv": jnp.arange(3)[None, :, None] + 10 * jnp.arange(2)[:, None, None] + jnp.zeros((2, 3, 4)),
                      "position": jnp.array([7, 7])}, "position": jnp.int32(7)}
  tiled = common.expand_cache(cache, 2)
  assert tiled["layers"]["kv"].shape == (2, 6, 4)
  np.testing.assert_array_equal(tiled["layers"]["position"], [7, 7])
  gathered = common.gather_cache_rows(tiled, jnp.array([5, 0, 0, 3, 2, 1]))
  np.testing.assert_array_equal(gathered["layers"]["kv"][:, :, 0], [[2, 0, 0, 1, 1, 0], [12, 10, 10, 11, 11, 10]])
  np.testing.assert_array_equal(gathered["layers"]["position"], [7, 7])
  assert int(gathered["position"]) == 7


def test_length_penalty_is_gnmt():
  np.testing.assert_allclose(length_penalty(7, 0.6), (12 / 6) ** 0.6, rtol=1e-6)
  np.testing.assert_allclose(length_penalty(jnp.array([1, 3]), 0.0), [1.0, 1.0])


@pytest.mark.parametrize("with_limits", [False, True])
def test_beam_size_1_is_greedy(with_limits):
  model = StepModel(seed=0, batch=6, vocab=6, max_len=9)
  limits = np.array([1, 3, 5, 9, 12, 2]) if with_limits else None
  seqs, scores = run_beam(model, limits, beam_size=1, alpha=0.6)
  greedy = run_greedy(model, limits)
  np.testing.assert_array_equal(seqs[:, 0], greedy)
  ended_early = 0
  for b in range(model.batch):
    ref, logp = model.np_greedy(b, None if limits is None else limits[b])
    assert unpad(greedy[b]) == ref
    if ref[-1] == EOS:
      ended_early += len(ref) < model.max_len
      np.testing.assert_allclose(scores[b, 0], logp / lp(len(ref), 0.6), rtol=1e-5, atol=1e-5)
  assert ended_early >= 2  # the table makes greedy stop before max_len in several rows


@pytest.mark.parametrize("alpha,with_limits", [(0.6, False), (0.6, True), (1.5, False), (0.0, True)])
def test_wide_beam_is_exact(alpha, with_limits):
  # 3**3 non-EOS prefixes of length 3 and 4 tokens: a beam of 64 keeps every prefix (2K = 128 >= 108 extensions),
  # so its finished set must be exactly the best of all EOS-ended sequences.
  model = PrefixModel(seed=20, batch=3, vocab=4, max_len=4)
  limits = np.array([2, 3, 9]) if with_limits else None
  beam = 64
  seqs, scores = run_beam(model, limits, beam_size=beam, alpha=alpha)
  greedy = run_greedy(model, limits)
  greedy_suboptimal = 0
  for b in range(model.batch):
    limit = None if limits is None else int(limits[b])
    ref = model.all_finished(b, alpha, limit)
    n = len(ref)
    np.testing.assert_allclose(scores[b, :n], [s for s, _ in ref], atol=1e-5)
    np.testing.assert_array_equal(scores[b, n:], NEG_INF)
    assert np.all(seqs[b, n:] == 0)
    assert unpad(seqs[b, 0]) == ref[0][1]
    assert sorted(unpad(s) for s in seqs[b, :n]) == sorted(s for _, s in ref)
    greedy_seq = unpad(greedy[b])
    assert greedy_seq == model.np_greedy(b, limit)
    greedy_suboptimal += model.score(b, greedy_seq, alpha) < ref[0][0] - 1e-3
  assert greedy_suboptimal >= 1  # a greedy-only decoder fails this test


def test_narrow_beam_scores_match_its_sequences_and_cache_follows_beams():
  # Logits depend on the whole prefix, held only in the row-wise cache: if cached rows did not follow their beam
  # when beams are reordered, the returned scores would not be the scores of the returned sequences.
  model = PrefixModel(seed=11, batch=4, vocab=5, max_len=7, scale=1.5)
  limits = np.array([3, 5, 7, 20])
  alpha = 0.6
  seqs, scores = run_beam(model, limits, beam_size=4, alpha=alpha)
  for b in range(model.batch):
    assert np.all(np.diff(scores[b]) <= 0)
    hyps = [unpad(s) for s in seqs[b]]
    assert len(set(hyps)) == 4
    for hyp, score in zip(hyps, scores[b]):
      assert hyp[-1] == EOS and len(hyp) <= min(limits[b], model.max_len)
      np.testing.assert_allclose(score, model.score(b, hyp, alpha, int(limits[b])), atol=1e-5)
    # Beam search is no worse than greedy.
    assert scores[b, 0] >= model.score(b, model.np_greedy(b, int(limits[b])), alpha, int(limits[b])) - 1e-5


def test_max_lengths_forces_eos_and_pads():
  model = PrefixModel(seed=5, batch=4, vocab=5, max_len=6, scale=0.5)
  # Make EOS very unlikely so that every hypothesis runs to its limit.
  model.table[..., EOS] -= 30.0
  limits = np.array([0, 1, 4, 6])
  seqs, scores = run_beam(model, limits, beam_size=3, alpha=0.6)
  greedy = run_greedy(model, limits)
  for b, limit in enumerate([1, 1, 4, 6]):
    assert np.all(np.diff(scores[b]) <= 0)
    for k in range(3):
      hyp = unpad(seqs[b, k])
      if limit == 1:
        assert k > 0 or hyp == (EOS,)
        if k > 0:  # only one hypothesis exists
          assert scores[b, k] == NEG_INF and not seqs[b, k].any()
        continue
      assert len(hyp) == limit and hyp[-1] == EOS
    assert len(unpad(greedy[b])) == limit and unpad(greedy[b])[-1] == EOS


def test_without_eos_returns_alive_beams():
  model = PrefixModel(seed=6, batch=2, vocab=4, max_len=3)
  model.table[..., EOS] = -1e9  # nothing ever finishes
  seqs, scores = run_beam(model, beam_size=2, alpha=0.6)
  assert np.all(seqs != EOS)
  for b in range(2):
    assert np.all(np.diff(scores[b]) <= 0)
    for k in range(2):
      seq = tuple(int(t) for t in seqs[b, k])
      logp = sum(model.np_log_probs(b, seq[:i])[t] for i, t in enumerate(seq))
      np.testing.assert_allclose(scores[b, k], logp / lp(3, 0.6), rtol=1e-5)


def _schedule_model(eos_logits, batch=1, vocab=3):
  """Logits depend only on the step: token 2 has logit 0, EOS `eos_logits[step]`, pad -1e4."""
  table = np.full((len(eos_logits), vocab), -1e4, np.float32)
  table[:, 2:] = 0.0
  table[:, EOS] = eos_logits
  table = jnp.asarray(table)

  def step(ids, cache):
    del ids
    return jnp.broadcast_to(table[cache["index"]], (cache["row"].shape[0], vocab)), {
        "row": cache["row"], "index": cache["index"] + 1}

  return step, {"row": jnp.zeros((batch,), jnp.int32), "index": jnp.int32(0)}


def test_early_stopping_bound_uses_the_longest_length():
  # alpha = 1: [EOS] scores log(1/2), [2, EOS] log(1/4) / (7/6), and [2]*9 + [EOS] about log(1/4) / (15/6), the
  # best. After step 2 the finished set is full and a bound at the current length (log(1/4) / (7/6)) would stop.
  L = 10
  step, cache = _schedule_model([0.0, 0.0] + [-12.0] * 7 + [12.0])
  fn = jax.jit(functools.partial(beam_search, step, batch_size=1, beam_size=2, alpha=1.0, max_decode_len=L))
  seqs, scores = fn(cache)
  assert unpad(seqs[0, 0]) == (2,) * 9 + (EOS,)
  np.testing.assert_allclose(scores[0, 0], np.log(0.25) / (15 / 6), atol=1e-3)
  np.testing.assert_allclose(scores[0, 1], np.log(0.5), atol=1e-5)


def test_early_stopping_stops():
  L = 20
  step, cache = _schedule_model([10.0] * L)
  calls = []

  def counted(ids, cache):
    jax.debug.callback(lambda: calls.append(1))
    return step(ids, cache)

  fn = jax.jit(functools.partial(beam_search, counted, batch_size=1, beam_size=2, alpha=0.6, max_decode_len=L))
  seqs, scores = fn(cache)
  jax.block_until_ready(scores)
  assert unpad(seqs[0, 0]) == (EOS,) and unpad(seqs[0, 1]) == (2, EOS)
  # Finished after step 2: [EOS] ~ 0 and [2, EOS] ~ -10 / lp(2); after step 3 the alive beams (~ -30) cannot
  # reach -10 / lp(2) even at length 20, so the search stops after 3 of 20 steps.
  assert len(calls) == 3


def test_greedy_pads_after_eos_and_stops():
  model = StepModel(seed=2, batch=5, vocab=6, max_len=8, eos_rate=0.3)
  out = run_greedy(model)
  for b in range(model.batch):
    assert unpad(out[b]) == model.np_greedy(b)[0]


def test_greedy_picks_the_argmax_the_lowest_id_on_ties_and_the_first_nan():
  from jformer.decode.greedy import argmax_picker

  logits = jax.random.normal(jax.random.PRNGKey(3), (16, 1000))
  picked = argmax_picker(logits, jnp.int32(0))
  assert picked.dtype == jnp.int32
  np.testing.assert_array_equal(picked, np.argmax(np.asarray(logits), axis=-1))
  tied = jnp.zeros((3, 7)).at[0, 2].set(1.0).at[0, 5].set(1.0).at[1, 6].set(jnp.nan).at[1, 4].set(jnp.nan)
  np.testing.assert_array_equal(argmax_picker(tied, jnp.int32(0)), [2, 4, 0])
  np.testing.assert_array_equal(argmax_picker(tied, jnp.int32(0)), jnp.argmax(tied, axis=-1))
