"""Generation with the decoder-only language model (jformer/decode/generator.py): cached generation equals the full
forward pass for every attention variant that decodes (plug-ins included) and every positional encoding; prompts of
mixed lengths, sampling per prompt, beam 1; the prefill writes several tokens at a time, causally."""

from __future__ import annotations

import functools
import pathlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import PLUGIN_NAME, positional_overrides, skip_unless_runs_here
from jformer import attention, positional, tasks
from jformer import config as config_lib
from jformer.decode import generator
from jformer.decode.translator import Translator
from jformer.ops.tokens import EOS_ID, PAD_ID

DEMO = pathlib.Path(__file__).resolve().parents[1] / "configs" / "small.py"
VOCAB, PROMPT, NEW = 50, 5, 8
DECODING = [n for n in attention.available() if {"causal", "positions", "decode"} <= attention.get(n).supports]
# Cached generation in the default run: the default variant, a window and a linear kernel (the variants whose decode
# steps see the cache differently), and the encodings that act inside attention (a rotation, a bias). Every variant
# and encoding in the slow run; each variant's decode steps (test_attention_variants.py) and each encoding's cached
# decoding in a translation model (test_models.py) in the default run too.
DEFAULT_VARIANTS, DEFAULT_ENCODINGS = ("dot_product", "local", "linear"), ("rotary", "alibi")


def default_or_slow(names, default):
  return [pytest.param(name, marks=() if name in default else pytest.mark.slow) for name in names]


def lm_config(**overrides):
  base = {"model.architecture": "lm", "model.vocab_size": VOCAB, "model.d_model": 32, "model.num_heads": 4,
          "model.num_kv_heads": 2, "model.d_ff": 64, "model.num_decoder_layers": 2, "model.max_length": 32,
          "data.max_length": 32, "model.norm": "pre", "model.tie_output_embedding": False}
  return config_lib.load(DEMO, {**base, **overrides})


def lm_and_params(**overrides):
  """A small random LanguageModel; its input embedding scaled up so that greedy outputs vary from step to step (at
  initialisation they repeat one token), the logits staying of order 1."""
  model = tasks.build_model(lm_config(**overrides))
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), jnp.ones((2, 8), jnp.int32)))["params"]
  params["embedding"] = {"embedding": 8.0 * params["embedding"]["embedding"]}
  return model, params


def prompts(seed, rows=2, length=PROMPT):
  return jax.random.randint(jax.random.PRNGKey(seed), (rows, length), 2, VOCAB)


def until_eos(row) -> int:
  """Number of tokens of an output row up to and including its first EOS (all of them without one)."""
  hits = np.flatnonzero(np.asarray(row) == EOS_ID)
  return len(row) if hits.size == 0 else int(hits[0]) + 1


def check_cached_generation_equals_full_forward(model, params):
  """Greedy tokens from the cache = the arg-max of the full (uncached) forward pass on prompt + tokens, and the
  cached logits (prefill, then each step) = the full pass's logits at the same positions."""
  x = prompts(1)
  out = np.asarray(jax.jit(functools.partial(generator.generate_ids, model, max_new_tokens=NEW, method="greedy"))(
      params, x))
  tokens = jnp.concatenate([x, jnp.asarray(out)], axis=1)
  full = np.asarray(jax.jit(model.apply)({"params": params}, tokens))  # position i predicts tokens[:, i]
  assert len(set(out[0, :until_eos(out[0])].tolist())) >= 3, out  # not one token repeated: a test that can fail
  for b in range(x.shape[0]):
    n = until_eos(out[b])
    np.testing.assert_array_equal(out[b, :n], np.argmax(full[b, PROMPT:PROMPT + n, 1:], axis=-1) + 1)

  cache, start, prefill_logits = jax.jit(functools.partial(generator.prefill, model, cache_length=PROMPT + NEW))(
      params, x)
  np.testing.assert_array_equal(start, x[:, -1])
  np.testing.assert_allclose(prefill_logits, full[:, :PROMPT], atol=1e-4)
  feed = jax.jit(functools.partial(generator.feed, model))
  steps = []
  for t in range(NEW):
    logits, cache = feed(params, tokens[:, PROMPT - 1 + t:PROMPT + t], cache)
    steps.append(logits[:, 0])
  steps = np.stack(steps, axis=1)
  for b in range(x.shape[0]):
    n = until_eos(out[b])
    np.testing.assert_allclose(steps[b, :n], full[b, PROMPT:PROMPT + n], atol=1e-4)


@pytest.mark.parametrize("name", default_or_slow(DECODING, DEFAULT_VARIANTS))
def test_cached_generation_equals_full_forward_for_every_decoding_variant(name):
  variant = attention.get(name)
  skip_unless_runs_here(variant)
  options = {f"model.attention_options.{k}": v for k, v in variant.example_options.items()}
  check_cached_generation_equals_full_forward(*lm_and_params(**{"model.attention": name, **options}))


@pytest.mark.parametrize("name", default_or_slow(positional.available(), DEFAULT_ENCODINGS))
def test_cached_generation_equals_full_forward_for_every_positional_encoding(name):
  check_cached_generation_equals_full_forward(*lm_and_params(**positional_overrides(name)))


def test_cached_generation_equals_full_forward_for_a_plugin_variant(plugin_registry):
  check_cached_generation_equals_full_forward(*lm_and_params(**{"model.attention": PLUGIN_NAME}))


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_prefill_is_causal_and_equals_one_token_at_a_time():
  """A T-token cached call writes T slots and masks causally inside itself: its logits equal T one-token calls,
  and changing prompt token j moves only the logits from position j + 1 on."""
  model, params = lm_and_params()
  x = prompts(2, length=7)
  _, _, together = generator.prefill(model, params, x, 12)
  cache = generator.init_cache(model, params, 2, 12)
  context = jnp.pad(x[:, :-1], ((0, 0), (1, 0)))
  alone = []
  for t in range(context.shape[1]):
    logits, cache = generator.feed(model, params, context[:, t:t + 1], cache)
    alone.append(logits[:, 0])
  np.testing.assert_allclose(together, np.stack(alone, axis=1), atol=1e-4)
  _, _, changed = generator.prefill(model, params, x.at[:, 3].set(x[:, 3] % (VOCAB - 2) + 2), 12)
  np.testing.assert_allclose(changed[:, :4], together[:, :4], atol=1e-5)
  assert np.abs(np.asarray(changed[:, 4:] - together[:, 4:])).min(axis=-1).max() > 1e-4


class WordTokenizer:
  """Ids written as words: "5 7 9" <-> [5, 7, 9] (+ EOS from encode, as SentencePiece's)."""

  def encode(self, text: str) -> list[int]:
    return [int(w) for w in text.split()] + [EOS_ID]

  def decode(self, ids) -> str:
    ids = list(ids)
    ids = ids[:ids.index(EOS_ID)] if EOS_ID in ids else ids
    return "".join(f" {i}" for i in ids if i != PAD_ID)


PROMPTS = ["5 7 9", "11 3 8", "", "30 2 6 4", "", "11 3 8"]


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_mixed_prompt_lengths_in_one_call_equal_one_at_a_time():
  model, params = lm_and_params()
  together = generator.Generator(model, params, WordTokenizer(), batch_size=8, max_new_tokens=6, method="greedy")
  outputs = together(PROMPTS)
  assert outputs == [together([p])[0] for p in PROMPTS]
  assert outputs[1] == outputs[5] and outputs[2] == outputs[4] and len(set(outputs)) == 4
  for prompt, out in zip(PROMPTS[2:4], outputs[2:4]):  # the continuation only, the greedy tokens of the prompt.
    x = jnp.asarray([[int(w) for w in prompt.split()]], jnp.int32).reshape(1, -1)
    want = np.asarray(generator.generate_ids(model, params, x, max_new_tokens=6))[0]
    assert out == WordTokenizer().decode(want)


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_sampling_is_per_prompt_whatever_the_batching():
  """Each prompt alone on one device vs all together on 8 devices: the same samples; repeated prompts differ."""
  model, params = lm_and_params()
  options = dict(max_new_tokens=6, method="sample", temperature=1.0, top_k=20)
  rng = jax.random.PRNGKey(7)
  batched = generator.Generator(model, params, WordTokenizer(), batch_size=8, **options)
  together = batched(PROMPTS, rng)
  alone = generator.Generator(model, params, WordTokenizer(), batch_size=1, devices=jax.devices()[:1], **options)
  assert together == alone(PROMPTS, rng)
  assert together[1] != together[5] and together[2] != together[4]  # the same prompt, two keys
  assert together != batched(PROMPTS, jax.random.PRNGKey(8))


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_beam_of_one_is_greedy_and_a_wider_beam_scores_at_least_as_well():
  model, params = lm_and_params()
  x = prompts(3, rows=4)
  run = lambda **kw: np.asarray(jax.jit(functools.partial(generator.generate_ids, model, max_new_tokens=NEW, **kw))(
      params, x))
  greedy = run(method="greedy")
  np.testing.assert_array_equal(run(method="beam", beam_size=1, alpha=0.0), greedy)

  def log_prob(out):  # of each row's continuation up to its EOS, from the full forward pass.
    full = jax.nn.log_softmax(model.apply({"params": params}, jnp.concatenate([x, jnp.asarray(out)], 1)).at[
        ..., PAD_ID].set(-1e9))
    return np.array([sum(float(full[b, PROMPT + t, out[b, t]]) for t in range(until_eos(out[b])))
                     for b in range(len(out))])

  beam = run(method="beam", beam_size=4, alpha=0.0)
  assert (log_prob(beam) >= log_prob(greedy) - 1e-4).all()


def test_decoders_refuse_the_other_task():
  lm, lm_params = lm_and_params()
  with pytest.raises(ValueError, match="language model .* use `jformer generate`"):
    Translator(lm, lm_params, WordTokenizer())
  transformer = tasks.build_model(config_lib.load(DEMO, {"model.vocab_size": VOCAB, "model.d_model": 32,
                                                    "model.num_heads": 2, "model.d_ff": 64}))
  with pytest.raises(ValueError, match="translation model .* use `jformer translate`"):
    generator.Generator(transformer, {}, WordTokenizer())


def test_overlong_prompts_keep_their_last_tokens():
  model, params = lm_and_params()
  gen = generator.Generator(model, params, WordTokenizer(), batch_size=8, max_new_tokens=4, method="greedy")
  words = [str(2 + i % 40) for i in range(40)]  # 40 tokens > max_length - max_new_tokens = 28
  assert gen([" ".join(words)]) == gen([" ".join(words[-28:])])  # the last 28 keep room for the 4 new tokens.
  with pytest.raises(ValueError, match=r"--max_new_tokens=32 must be from 1 to model.max_length - 1 = 31"):
    generator.Generator(model, params, WordTokenizer(), batch_size=8, max_new_tokens=32, method="greedy")
