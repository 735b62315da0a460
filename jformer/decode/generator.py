"""Continuing prompts with a trained language model (`jformer.models.LanguageModel`), with the KV cache.

The model reads BOS (0) then the prompt's tokens (no EOS after the prompt), as in training, where BOS starts every
document. Prefill: one cached call feeds BOS and all prompt tokens but the last (causal inside the call; the cache
holds their keys and values), then the decoders (`jformer.decode.search`) continue from the prompt's last token,
one token per step, until EOS or `max_new_tokens`. An empty prompt feeds BOS alone: an unconditional sample.

The cache has one step counter for all rows (`models.layers.decode_step_positions`), so the rows of one call share
their prompt length: `Generator` groups prompts by token length (one compiled program per distinct length).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from jformer.decode.distributed import RowParallel, raw_key
from jformer.decode.search import check_options, search
from jformer.ops.tokens import BOS_ID, PAD_ID


def feed(model, params, ids_BxT, cache):
  """One cached call of a `LanguageModel`: `ids [B, T]` at the next T positions -> (logits `[B, T, V]`, cache)."""
  logits, variables = model.apply({"params": params, "cache": cache}, ids_BxT, decode=True, mutable=["cache"])
  return logits, variables["cache"]


def init_cache(model, params, batch: int, length: int):
  """The empty cache of a `LanguageModel` for `batch` rows and `length` positions (step counters at 0); under `jit`
  everything but the cache is dead code."""
  _, variables = model.apply({"params": params}, jnp.zeros((batch, length), jnp.int32), decode=True,
                             mutable=["cache"])
  return variables["cache"]


def cache_at(model, params, batch: int, length: int):
  """The cache of `init_cache(model, params, batch, length)` with its step counters at `length - 1`: what one more
  decode step there reads and writes (its contents zeros); for timing a step at a generated length."""
  at_end = lambda path, x: jnp.full_like(x, length - 1) if path[-1].key == "position" else x
  return jax.tree_util.tree_map_with_path(at_end, init_cache(model, params, batch, length))


def prefill(model, params, prompts_BxN, cache_length: int):
  """(cache after BOS and `prompts[:, :-1]`, start tokens `[B]` = the prompts' last tokens); N = 0: the empty
  cache and BOS. Also returns the prefill's logits `[B, N, V]` (position i predicts prompt token i)."""
  batch, n = prompts_BxN.shape
  cache = init_cache(model, params, batch, cache_length)
  if n == 0:
    return cache, jnp.full((batch,), BOS_ID, jnp.int32), jnp.zeros((batch, 0, model.config.vocab_size))
  logits, cache = feed(model, params, jnp.pad(prompts_BxN[:, :-1], ((0, 0), (1, 0)), constant_values=BOS_ID), cache)
  return cache, prompts_BxN[:, -1].astype(jnp.int32), logits


def make_tokens_to_logits(model, params):
  """The decoders' model call: `(ids [N, 1], cache) -> (logits [N, V], cache)`; padding (id 0) never predicted."""

  def tokens_to_logits(ids_Nx1, cache):
    logits, cache = feed(model, params, ids_Nx1, cache)
    return logits[:, -1].at[:, PAD_ID].set(-1e9), cache

  return tokens_to_logits


def generate_ids(model, params, prompts_BxN, *, max_new_tokens: int, method: str = "greedy", beam_size: int = 4,
                 alpha: float = 0.6, rng=None, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                 max_lengths=None):
  """Continuation ids `[B, max_new_tokens]` (EOS then 0s, or cut there) of prompts `[B, N]` (N tokens each, no
  padding, no EOS; N = 0 for unconditional samples); jit-able with static options.

  Args:
    model, params: a `LanguageModel` and its parameters.
    prompts_BxN: int prompt ids.
    max_new_tokens: static number of output positions; N + max_new_tokens <= `model.config.max_length`.
    method, beam_size, alpha, rng, temperature, top_k, top_p: see `jformer.decode.search.search` (`rng`: one PRNG
      key, or one per row).
    max_lengths: optional int `[B]`: row b ends in EOS at its `max_lengths[b]`-th token at the latest.
  """
  n = prompts_BxN.shape[1]
  if n + max_new_tokens > model.config.max_length:
    raise ValueError(f"a prompt of {n} tokens + max_new_tokens={max_new_tokens} exceeds model.max_length="
                     f"{model.config.max_length}; shorten the prompt or lower max_new_tokens")
  cache, start_ids, _ = prefill(model, params, prompts_BxN, n + max_new_tokens)
  step = make_tokens_to_logits(model, params)  # nothing row-wise outside the cache: the same for beams.
  return search(lambda rows_per_prompt: step, cache, method=method, batch_size=prompts_BxN.shape[0],
                max_decode_len=max_new_tokens, beam_size=beam_size, alpha=alpha, rng=rng, temperature=temperature,
                top_k=top_k, top_p=top_p, max_lengths=max_lengths, start_ids=start_ids)


class Generator:
  """Continues lists of prompts with a language model, its params and a tokenizer, on every device of every process.

  Prompts are grouped by token length (the rows of a call share it, see the module doc) and decoded in batches of
  `batch_size` rows (rounded up to a multiple of the number of devices), each split across `devices` (default: all
  devices of all processes; `jformer.decode.distributed`) and gathered back. Prompt i samples with
  `fold_in(rng, i)`, whatever its batch or device. With several processes, every process must call with the same
  prompts; each gets all continuations back.

  A prompt longer than `model.max_length - 1` tokens keeps its last ones (one warning names such lines); a
  continuation has at most `max_new_tokens` tokens, fewer where the prompt leaves less room in `model.max_length`.
  """

  def __init__(self, model, params, tokenizer, *, batch_size: int = 32, max_new_tokens: int = 50,
               devices: Sequence[jax.Device] | None = None, **decode_options):
    if model.is_encoder_decoder:
      raise ValueError("this run is a translation model (model.architecture='transformer'), which needs a source "
                       "sentence to decode from: use `jformer translate`.")
    if not 1 <= max_new_tokens < model.config.max_length:
      raise ValueError(f"--max_new_tokens={max_new_tokens} must be from 1 to model.max_length - 1 = "
                       f"{model.config.max_length - 1} (the prompt and its continuation share model.max_length)")
    model.config.check_attention(decoding=True)  # a variant that trains but cannot decode: one line saying why.
    self.model, self.tokenizer = model, tokenizer
    self.parallel = RowParallel(devices)
    self.params = self.parallel.replicate(params)
    self.batch_size, self.max_new_tokens = self.parallel.padded_rows(batch_size), max_new_tokens
    self.max_length = model.config.max_length
    self.decode_options = decode_options
    self._decode = self.parallel.map_rows(self._decode_rows)

  def _decode_rows(self, shared, rows, *, max_new_tokens: int):
    """One device's share: (prompt ids [b, N], prompt indices [b], real-row flags [b]) -> ids [b, max_new_tokens]."""
    params, rng = shared
    prompts, indices, real = rows
    keys = None if rng is None else jax.vmap(jax.random.fold_in, (None, 0))(rng, indices)
    limits = jnp.where(real, max_new_tokens + 1, 1)  # filler rows end at once; real rows run to EOS or the end.
    return generate_ids(self.model, params, prompts, max_new_tokens=max_new_tokens, rng=keys, max_lengths=limits,
                        **self.decode_options)

  def __call__(self, prompts: Sequence[str], rng=None) -> list[str]:
    ids = [self.tokenizer.encode(p)[:-1] if p.strip() else [] for p in prompts]  # without the EOS encode appends.
    longest = self.max_length - self.max_new_tokens  # so that every prompt gets its max_new_tokens.
    overlong = [i + 1 for i, x in enumerate(ids) if len(x) > longest]
    if overlong:
      logging.warning("%d prompt(s) (%s%s) longer than model.max_length - max_new_tokens = %d tokens: only their "
                      "last %d tokens are read.", len(overlong), ", ".join(map(str, overlong[:10])),
                      ", ..." if len(overlong) > 10 else "", longest, longest)
      ids = [x[-longest:] if len(x) > longest else x for x in ids]
    groups: dict[int, list[int]] = {}
    for i, x in enumerate(ids):
      groups.setdefault(len(x), []).append(i)
    outputs = [""] * len(prompts)
    shared = (self.params, None if rng is None else self.parallel.replicate(raw_key(rng)))
    for length, members in sorted(groups.items()):
      for start in range(0, len(members), self.batch_size):
        chunk = members[start:start + self.batch_size]
        inputs = np.zeros((self.batch_size, length), np.int32)
        indices, real = np.zeros((self.batch_size,), np.int32), np.zeros((self.batch_size,), bool)
        for row, i in enumerate(chunk):
          inputs[row], indices[row], real[row] = ids[i], i, True
        rows = self.parallel.shard_rows((inputs, indices, real))
        new_tokens = self.max_new_tokens
        decoded = self.parallel.gather(self._decode(shared, rows, max_new_tokens=new_tokens))
        for row, i in enumerate(chunk):
          outputs[i] = self._continuation(ids[i], decoded[row])
    return outputs

  def _continuation(self, prompt_ids: list[int], output_ids: np.ndarray) -> str:
    """The text the continuation adds to the prompt (with the space it opens with, which the prompt's pieces
    decoded alone would lose)."""
    whole, head = self.tokenizer.decode(prompt_ids + list(output_ids)), self.tokenizer.decode(prompt_ids)
    if whole.startswith(head):
      return whole[len(head):]
    return self.tokenizer.decode(list(output_ids))


def make_generator(config, model, params, tokenizer, *, max_new_tokens: int, **overrides) -> Generator:
  """A `Generator` with a run's decoding options (`config.decode`: method, beam_size, alpha, temperature, top_k,
  top_p, batch_size), each replaced by its value in `overrides` unless that is None, on all devices of all
  processes. Values out of range, and options given that the method does not read, are refused in one line
  (`search.check_options`)."""
  given = {k: v for k, v in overrides.items() if v is not None}
  d = {**config.decode.to_dict(), **given}
  check_options(d["method"], {**d, "max_new_tokens": max_new_tokens}, given=given)
  options = dict(method=d["method"], beam_size=d["beam_size"], alpha=d["alpha"])
  if d["method"] == "sample":
    options.update(temperature=d["temperature"], top_k=d["top_k"], top_p=d["top_p"])
  return Generator(model, params, tokenizer, batch_size=d["batch_size"], max_new_tokens=max_new_tokens, **options)

