"""Sampling: its limits equal greedy search, filters keep the right tokens, frequencies match the softmax."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import EOS
from helpers import SamplingStepModel as StepModel
from jformer.decode import NEG_INF, filter_logits, greedy_search, sample


def run_sample(model, seed=0, max_lengths=None, **kwargs):
  fn = jax.jit(functools.partial(sample, model.step, batch_size=model.batch, max_decode_len=model.max_len, **kwargs))
  return np.asarray(fn(model.init_cache(), jax.random.key(seed), max_lengths=max_lengths))


def run_greedy(model, max_lengths=None):
  fn = jax.jit(functools.partial(greedy_search, model.step, batch_size=model.batch, max_decode_len=model.max_len))
  return np.asarray(fn(model.init_cache(), max_lengths=max_lengths))


@pytest.fixture(scope="module")
def model():
  return StepModel(seed=0, batch=64, vocab=7, max_len=10)


@pytest.fixture(scope="module")
def greedy(model):
  out = run_greedy(model)
  assert (out == EOS).any(axis=1).sum() >= 10  # many rows stop before max_len
  return out


@pytest.mark.parametrize("kwargs", [dict(temperature=0.0), dict(top_k=1), dict(top_p=1e-4),
                                    dict(temperature=0.0, top_k=3, top_p=0.5), dict(temperature=1e-4)])
def test_degenerate_sampling_is_greedy(model, greedy, kwargs):
  np.testing.assert_array_equal(run_sample(model, seed=1, **kwargs), greedy)


def _check_after_eos(seqs):
  for row in seqs:
    hits = np.flatnonzero(row == EOS)
    if hits.size:
      assert np.all(row[hits[0] + 1:] == 0)


@pytest.mark.parametrize("top_k", [2, 3])
def test_top_k_never_samples_outside_the_k_best(model, top_k):
  seqs = run_sample(model, seed=2, temperature=1.5, top_k=top_k)
  _check_after_eos(seqs)
  seen_non_best = 0
  for b in range(model.batch):
    prev = 0
    for t, token in enumerate(seqs[b]):
      logits = model.table[b, t, prev]
      rank = int(np.sum(logits > logits[token]))
      assert rank < top_k
      seen_non_best += rank > 0
      if token == EOS:
        break
      prev = token
  assert seen_non_best > 20  # it does sample, not just take the arg-max


def test_sampling_differs_by_key_and_respects_max_lengths(model):
  limits = jnp.asarray(np.random.default_rng(3).integers(1, 6, size=model.batch))
  a = run_sample(model, seed=4, max_lengths=limits)
  b = run_sample(model, seed=5, max_lengths=limits)
  assert (a != b).any()
  _check_after_eos(a)
  for row, limit in zip(a, np.asarray(limits)):
    assert EOS in row[:limit]


def test_filter_logits():
  logits = jnp.log(jnp.array([[0.1, 0.4, 0.2, 0.3], [0.25, 0.25, 0.4, 0.1]]))
  kept = lambda x: (np.asarray(x) > NEG_INF / 2).astype(int).tolist()
  assert kept(filter_logits(logits, top_k=2)) == [[0, 1, 0, 1], [1, 1, 1, 0]]  # ties with the k-th are kept
  assert kept(filter_logits(logits, top_p=0.5)) == [[0, 1, 0, 1], [1, 1, 1, 0]]
  assert kept(filter_logits(logits, top_p=0.35)) == [[0, 1, 0, 0], [0, 0, 1, 0]]
  assert kept(filter_logits(logits, top_p=0.75)) == [[0, 1, 1, 1], [1, 1, 1, 0]]
  # top-p acts on the renormalised top-k distribution: row 0 becomes 0.44, 0.33, 0.22, so 0.75 drops the 0.22.
  assert kept(filter_logits(logits, top_k=3, top_p=0.75)) == [[0, 1, 0, 1], [1, 1, 1, 0]]
  assert kept(filter_logits(logits)) == [[1, 1, 1, 1], [1, 1, 1, 1]]
  with pytest.raises(ValueError):
    filter_logits(logits, top_p=0.0)
  with pytest.raises(ValueError):
    filter_logits(logits, top_k=-1)


@pytest.mark.parametrize("kwargs,keep", [(dict(temperature=0.7), None),
                                         (dict(temperature=1.3, top_k=3), [0, 2, 4]),
                                         (dict(top_p=0.6), [2, 4])])
def test_one_step_frequencies_match_softmax(kwargs, keep):
  vocab, n = 6, 40_000
  logits = np.array([0.3, -0.5, 1.2, -1.0, 0.9, 0.0])  # sorted: 2, 4, 0, 5, 1, 3
  step = lambda ids, cache: (jnp.broadcast_to(jnp.asarray(logits, jnp.float32), (n, vocab)), cache)
  fn = jax.jit(functools.partial(sample, step, batch_size=n, max_decode_len=1, **kwargs))
  tokens = np.asarray(fn({}, jax.random.key(7)))[:, 0]
  counts = np.bincount(tokens, minlength=vocab)
  z = logits / kwargs.get("temperature", 1.0)
  p = np.exp(z - z.max())
  p /= p.sum()
  if keep is not None:  # the renormalised filtered distribution (softmax(logits) of 2, 4 is 0.53, above 0.6 with 0)
    mask = np.zeros(vocab, bool)
    mask[keep] = True
    assert counts[~mask].sum() == 0
    p = np.where(mask, p, 0.0) / p[mask].sum()
  expected = n * p[p > 0]
  chi2 = np.sum((counts[p > 0] - expected) ** 2 / expected)
  assert chi2 < 25.0, (counts, expected)  # df <= 5: p(chi2 > 25) < 2e-4
