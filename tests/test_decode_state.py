"""What a variant keeps between decode steps (jformer/attention/decode_state.py): `local` the last W keys and values,
`linear` its recurrent state, the others every key and value. Cached generation still equals the full forward pass
(tests/test_decode_generate.py runs it for every variant, the windowed and recurrent ones included, and
tests/test_layer_patterns.py beside softmax layers); here, the cache sizes against the length, beam search over the
kept states, and the declarations a registration is refused for."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_decode_generate import lm_and_params, prompts

from jformer import attention
from jformer.attention import decode_state
from jformer.decode import beam_search, generator
from jformer.ops.tokens import EOS_ID, PAD_ID


def cache_bytes(model, params, length: int) -> int:
  cache = jax.eval_shape(functools.partial(generator.init_cache, model, batch=2, length=length), params)
  return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(cache))


@pytest.mark.parametrize("name, options, grows", [
    ("dot_product", {}, True), ("local", {"window_size": 3}, False), ("linear", {}, False)])
def test_cache_grows_with_the_length_only_for_a_full_state(name, options, grows):
  model, params = lm_and_params(**{"model.attention": name, "model.max_length": 64,
                                   **{f"model.attention_options.{k}": v for k, v in options.items()}})
  short, long = cache_bytes(model, params, 16), cache_bytes(model, params, 64)
  assert (long > short) == grows, (short, long)
  if name == "local":  # 2 layers x 2 rows x (keys and values: 2 x 2 kv heads x 3 slots x head_dim 8 x 4 bytes, and
    # 3 int32 positions), + 3 int32 step counters (the positions' and each layer's).
    assert short == 2 * 2 * (2 * 2 * 3 * 8 * 4 + 3 * 4) + 3 * 4


def recomputing_step(model, params, prompts_BxN, max_new_tokens: int):
  """(tokens_to_logits, cache) of a decoder without decode state: its "cache" is each row's tokens so far
  `[B, N + max_new_tokens]` (and the shared position of the next token), and every step runs the full forward pass
  on them. Beam search reorders those rows like any row-wise leaf: what a kept state must match."""
  n = prompts_BxN.shape[1]
  # Tokens not yet generated are EOS_ID + 1 (not padding: the token a position predicts marks it as real); causal
  # masking keeps them out of the logits of the positions before.
  history = jnp.pad(prompts_BxN.astype(jnp.int32), ((0, 0), (0, max_new_tokens)), constant_values=EOS_ID + 1)

  def tokens_to_logits(ids_Nx1, cache):
    tokens = cache["tokens"].at[:, cache["next"] - 1].set(ids_Nx1[:, 0])  # the step's input: the previous token.
    logits = model.apply({"params": params}, tokens)[:, cache["next"]]
    return logits.at[:, PAD_ID].set(-1e9), {"tokens": tokens, "next": cache["next"] + 1}

  return tokens_to_logits, {"tokens": history, "next": jnp.int32(n)}


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
@pytest.mark.parametrize("name", ["local", "linear"])
def test_beam_search_reorders_a_kept_state_like_the_full_cache(name):
  """Beam search over a variant's kept decode state (the window's keys, values and positions; the recurrent sums)
  gives exactly the sequences and scores of the same search over a decoder that keeps no state and recomputes the
  full forward pass at every step: every leaf of the kept state follows its beam when beams are reordered. A beam
  of 1 is greedy."""
  model, params = lm_and_params(**{"model.attention": name, "model.attention_options.window_size": 3}
                                if name == "local" else {"model.attention": name})
  x = prompts(2)
  run = lambda **options: np.asarray(jax.jit(functools.partial(generator.generate_ids, model, max_new_tokens=6,
                                                                **options))(params, x))
  np.testing.assert_array_equal(run(method="beam", beam_size=1, alpha=0.0), run(method="greedy"))
  step, history = recomputing_step(model, params, x, 6)
  want, want_scores = jax.jit(lambda cache: beam_search(
      step, cache, batch_size=2, beam_size=3, alpha=0.0, max_decode_len=6, start_ids=x[:, -1]))(history)
  cache, start_ids, _ = generator.prefill(model, params, x, x.shape[1] + 6)
  got, scores = jax.jit(lambda cache: beam_search(
      generator.make_tokens_to_logits(model, params), cache, batch_size=2, beam_size=3, alpha=0.0, max_decode_len=6,
      start_ids=start_ids))(cache)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_allclose(scores, want_scores, atol=1e-4)
  np.testing.assert_array_equal(run(method="beam", beam_size=3, alpha=0.0), want[:, 0])  # the best of each row.


def test_declarations_that_cannot_work_are_refused(scratch_registries):
  def fn(query, key, value, **masking):
    return value

  weights = attention.softmax_weights
  with pytest.raises(ValueError, match=r"decode_state=window\('window'\) names no option of it \(its options: "
                                       r"\['size'\]\)"):
    attention.register("bad_window", supports={"causal", "decode"}, weights=weights,
                       decode_state=decode_state.window("window"))(lambda q, k, v, *, size=4, **m: v)
  with pytest.raises(ValueError, match=r"decode_state=recurrent needs 'decode' in supports="):
    attention.register("no_decode", supports={"causal"}, weights=weights,
                       decode_state=decode_state.recurrent(lambda *a: {}, lambda *a, **o: None))(fn)
  with pytest.raises(ValueError, match=r"decode_state=recurrent\(init, step\) needs both functions"):
    attention.register("half", supports={"causal", "decode"}, weights=weights,
                       decode_state=decode_state.DecodeState("recurrent", init=lambda *a: {}))(fn)
  assert attention.get("local").decode_state == decode_state.window("window_size")
  assert attention.get("dot_product").decode_state is decode_state.FULL
