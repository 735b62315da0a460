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
from jformer.decode import generator


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


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
@pytest.mark.parametrize("name", ["local", "linear"])
def test_beam_search_reorders_a_kept_state_like_the_full_cache(name):
  """A beam of 1 is greedy; a wider beam's best sequence scores at least the greedy one under the full forward pass
  (beam search gathers every row-wise leaf of the cache, the window's positions and the recurrent sums too)."""
  model, params = lm_and_params(**{"model.attention": name, "model.attention_options.window_size": 3}
                                if name == "local" else {"model.attention": name})
  x = prompts(2)
  run = lambda **options: np.asarray(jax.jit(functools.partial(generator.generate_ids, model, max_new_tokens=6,
                                                                **options))(params, x))
  greedy = run(method="greedy")
  np.testing.assert_array_equal(run(method="beam", beam_size=1, alpha=0.0), greedy)
  beam = run(method="beam", beam_size=3, alpha=0.0)

  def log_prob(continuation):
    tokens = jnp.concatenate([x, jnp.asarray(continuation)], axis=1)
    logits = jax.nn.log_softmax(model.apply({"params": params}, tokens)[:, x.shape[1]:], axis=-1)
    return np.asarray(jnp.take_along_axis(logits, tokens[:, x.shape[1]:, None], axis=-1)[..., 0].sum(-1))

  assert (log_prob(beam) >= log_prob(greedy) - 1e-4).all()


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
