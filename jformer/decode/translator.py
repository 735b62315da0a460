"""Translating text with a trained Transformer: tokenize, batch by length, decode with the KV cache, detokenize.

Decoding follows the paper (Sec. 6.1): beam 4, length penalty alpha 0.6, maximum output length = source
length + 50 with early stopping. Greedy search and sampling are available through `method`; `make_translator` builds
a `Translator` with a run's `config.decode`.
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import traverse_util

from jformer import text
from jformer.decode.common import expand_cache, flat_batch_beam_expand
from jformer.decode.distributed import RowParallel, raw_key
from jformer.decode.search import search
from jformer.models.attention_cache import CROSS_KEY, CROSS_VALUE
from jformer.ops.tokens import PAD_ID


# Cache entries that do not change while decoding (the encoder-decoder keys/values, `MultiHeadAttention`).
FIXED_CACHE_ENTRIES = (CROSS_KEY, CROSS_VALUE)


def split_cache(cache) -> tuple[dict, dict]:
  """(the entries a decoding step updates, the fixed encoder-decoder keys/values): beam search reorders only the
  first (every beam of a sentence holds the same encoder keys/values)."""
  flat = traverse_util.flatten_dict(cache)
  fixed = {path: x for path, x in flat.items() if path[-1] in FIXED_CACHE_ENTRIES}
  updated = {path: x for path, x in flat.items() if path[-1] not in FIXED_CACHE_ENTRIES}
  return traverse_util.unflatten_dict(updated), traverse_util.unflatten_dict(fixed)


def make_tokens_to_logits(model, params, encoded_NxSxD, inputs_NxS, fixed_cache) -> Callable:
  """The decoders' model call: `(ids [N, 1], cache) -> (logits [N, V], cache)`; padding (id 0) never predicted.

  `fixed_cache` (from `split_cache`, N rows) is closed over, not carried: the decoders see only the rest.
  """
  fixed = traverse_util.flatten_dict(fixed_cache)

  def tokens_to_logits(ids_Nx1, cache):
    full = traverse_util.unflatten_dict({**traverse_util.flatten_dict(cache), **fixed})
    logits, variables = model.apply({"params": params, "cache": full}, encoded_NxSxD, inputs_NxS, ids_Nx1,
                                    decode=True, method=model.decode, mutable=["cache"])
    return logits[:, -1].at[:, PAD_ID].set(-1e9), split_cache(variables["cache"])[0]

  return tokens_to_logits


def init_cache(model, params, encoded_BxSxD, inputs_BxS, max_decode_len: int):
  """The decoding cache for B rows and `max_decode_len` target steps: empty self-attention slots, and the
  encoder-decoder keys/values projected from `encoded` with `params` (once, here, not at every step).

  The call runs the decoder once over placeholder targets; under `jit` everything but the cache is dead code.
  """
  targets = jnp.zeros((inputs_BxS.shape[0], max_decode_len), jnp.int32)
  _, variables = model.apply({"params": params}, encoded_BxSxD, inputs_BxS, targets, decode=True, method=model.decode,
                             mutable=["cache"])
  return variables["cache"]


def translate_ids(model, params, inputs_BxS, *, max_decode_len: int, method: str = "beam", beam_size: int = 4,
                  alpha: float = 0.6, max_extra_length: int = 50, rng=None, temperature: float = 1.0,
                  top_k: int = 0, top_p: float = 1.0):
  """Output ids `[B, max_decode_len]` (EOS then 0s) for source ids `[B, S]`; jit-able with static options.

  Row i may produce at most `source length + max_extra_length` tokens (EOS forced there). `rng` (sampling only) is
  one PRNG key or one per row (`jformer.decode.sample`).
  """
  batch = inputs_BxS.shape[0]
  encoded = model.apply({"params": params}, inputs_BxS, method=model.encode)
  cache, fixed_cache = split_cache(init_cache(model, params, encoded, inputs_BxS, max_decode_len))
  max_lengths = jnp.sum(inputs_BxS != PAD_ID, axis=1) + max_extra_length

  def step_for(rows_per_sentence: int):
    expand = functools.partial(flat_batch_beam_expand, beam_size=rows_per_sentence)
    return make_tokens_to_logits(model, params, expand(encoded), expand(inputs_BxS),
                                 expand_cache(fixed_cache, rows_per_sentence))

  return search(step_for, cache, method=method, batch_size=batch, max_decode_len=max_decode_len, beam_size=beam_size,
                alpha=alpha, rng=rng, temperature=temperature, top_k=top_k, top_p=top_p, max_lengths=max_lengths)


class Translator:
  """Translates lists of sentences with a model, its params and a tokenizer, on every device of every process.

  Each sentence's source length is rounded up to a multiple of `length_bucket` (its bucket), and sentences are
  decoded in batches of `batch_size` (rounded up to a multiple of the number of devices) from one bucket only, so
  only a few shapes are compiled and a sentence is always decoded in the same shapes, whatever it is batched with:
  its translation does not depend on the other sentences of the call (bfloat16 beam search included, whose scores
  would otherwise move with the padding its batch-mates bring: tests/test_decode_search.py).
  Each batch is split across `devices` (default: all devices of all processes; `jformer.decode.distributed`), each
  device decoding its share, and gathered back: every sentence gets the translation one device would give it
  (sampling included: sentence i draws with `fold_in(rng, i)`, whatever its batch or device). With several
  processes, every process must call with the same sentences; each gets all translations back.

  An empty line gives an empty translation; a source longer than the model's `max_length` is truncated to fit
  (its EOS kept), with one warning naming such lines.
  """

  def __init__(self, model, params, tokenizer, *, batch_size: int = 32, length_bucket: int = 16,
               max_extra_length: int = 50, devices: Sequence[jax.Device] | None = None, **decode_options):
    if not model.is_encoder_decoder:
      raise ValueError("this run is a language model (model.architecture='lm'), which continues text instead of "
                       "translating it: use `jformer generate`.")
    model.config.check_attention(decoding=True)  # a variant that trains but cannot decode: one line saying why.
    self.model, self.tokenizer = model, tokenizer
    self.parallel = RowParallel(devices)
    self.params = self.parallel.replicate(params)
    self.batch_size, self.length_bucket = self.parallel.padded_rows(batch_size), length_bucket
    self.max_length = model.config.max_length
    self.max_extra_length = max_extra_length
    self.decode_options = decode_options
    self._decode = self.parallel.map_rows(self._decode_rows)

  def use_params(self, params) -> Translator:
    """Decodes with `params` from now on, with the programs already compiled (the parameters are an argument of
    them): a run's BLEU at every evaluation compiles once."""
    self.params = self.parallel.replicate(params)
    return self

  def _decode_rows(self, shared, rows, *, max_decode_len: int):
    """One device's share: `rows` = (source ids [b, S], sentence indices [b]) -> output ids [b, max_decode_len]."""
    params, rng = shared
    inputs, sentences = rows
    keys = None if rng is None else jax.vmap(jax.random.fold_in, (None, 0))(rng, sentences)
    return translate_ids(self.model, params, inputs, max_decode_len=max_decode_len, rng=keys,
                         max_extra_length=self.max_extra_length, **self.decode_options)

  def __call__(self, sentences: Sequence[str], rng=None) -> list[str]:
    ids = [self._source_ids(s) for s in sentences]
    overlong = [i + 1 for i, x in enumerate(ids) if len(x) > self.max_length]
    if overlong:
      logging.warning("%d source line(s) (%s%s) longer than model.max_length=%d tokens: only their first %d tokens "
                      "are translated.", len(overlong), ", ".join(map(str, overlong[:10])),
                      ", ..." if len(overlong) > 10 else "", self.max_length, self.max_length - 1)
      ids = [x if len(x) <= self.max_length else x[:self.max_length - 1] + x[-1:] for x in ids]
    bucket = lambda i: min(self.max_length, -(-len(ids[i]) // self.length_bucket) * self.length_bucket)
    buckets: dict[int, list[int]] = {}
    for i in (i for i, x in enumerate(ids) if x):
      buckets.setdefault(bucket(i), []).append(i)
    outputs = [""] * len(sentences)
    shared = (self.params, None if rng is None else self.parallel.replicate(raw_key(rng)))
    chunks = [(length, members[start:start + self.batch_size]) for length, members in sorted(buckets.items())
              for start in range(0, len(members), self.batch_size)]
    for length, chunk in chunks:
      inputs = np.zeros((self.batch_size, length), np.int32)  # rows past the chunk: empty sources, dropped.
      for row, i in enumerate(chunk):
        inputs[row, :len(ids[i])] = ids[i]
      sentence_ids = np.zeros((self.batch_size,), np.int32)
      sentence_ids[:len(chunk)] = chunk
      rows = self.parallel.shard_rows((inputs, sentence_ids))
      max_decode_len = min(self.max_length, length + self.max_extra_length)
      decoded = self.parallel.gather(self._decode(shared, rows, max_decode_len=max_decode_len))
      for row, i in enumerate(chunk):
        outputs[i] = self.tokenizer.decode(decoded[row])
    return outputs

  def _source_ids(self, sentence: str) -> list[int]:
    return self.tokenizer.encode(sentence) if sentence.strip() else []


def source_lines(data: bytes, name: str, unit: str = "sentence") -> list[str]:
  """The lines of `data` (UTF-8, "\\n"-separated; a final newline ends the last line, "\\r\\n" allowed): source
  sentences, or (`unit="prompt"`) the prompts of `jformer generate`.

  Raises:
    ValueError: `data` holds no line, or a line that is not UTF-8 text (binary input); `name` (e.g. "stdin") and
      the line number are named.
  """
  lines = data.split(b"\n")
  if lines[-1] == b"":
    lines.pop()
  if not lines:
    raise ValueError(f"no source lines in {name}; give one {unit} per line.")
  return list(text.utf8_lines(lines, name, fix=f"give source {unit}s as UTF-8 text, one per line."))


def make_translator(config, model, params, tokenizer) -> Translator:
  """A `Translator` with a run's decoding options (`config.decode`: method, beam, alpha, sampling, batch size), on
  all devices of all processes."""
  d = config.decode
  options = dict(method=d.method, beam_size=d.beam_size, alpha=d.alpha)
  if d.method == "sample":
    options.update(temperature=d.temperature, top_k=d.top_k, top_p=d.top_p)
  return Translator(model, params, tokenizer, batch_size=d.batch_size, max_extra_length=d.max_extra_length,
                    **options)
