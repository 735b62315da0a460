"""One entry point over the decoding methods (`METHODS`), for the callers that pick one by name from a config."""

from __future__ import annotations

from typing import Callable

import jax

from jformer.decode.beam_search import beam_search
from jformer.decode.common import PyTree, TokensToLogits
from jformer.decode.greedy import greedy_search
from jformer.decode.sampling import sample

METHODS = ("beam", "greedy", "sample")


def search(step_for: Callable[[int], TokensToLogits], cache: PyTree, *, method: str, batch_size: int,
           max_decode_len: int, beam_size: int = 4, alpha: float = 0.6, rng=None, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, max_lengths: jax.Array | None = None,
           start_ids: jax.Array | None = None) -> jax.Array:
  """The best beam (`method="beam"`), the greedy output or a sample: int32 `[batch_size, max_decode_len]`.

  Args:
    step_for: `step_for(rows_per_element)` -> the model step for `batch_size * rows_per_element` rows (beam search
      asks for `beam_size`, whose step closes over anything row-wise expanded with `flat_batch_beam_expand`; the
      others ask for 1).
    cache: the cache for `batch_size` rows.
    method: one of METHODS.
    beam_size, alpha: beam search only. rng, temperature, top_k, top_p: sampling only (`jformer.decode.sample`).
    batch_size, max_decode_len, max_lengths, start_ids: as in `greedy_search`.
  """
  common = dict(batch_size=batch_size, max_decode_len=max_decode_len, max_lengths=max_lengths, start_ids=start_ids)
  if method == "beam":
    sequences, _ = beam_search(step_for(beam_size), cache, beam_size=beam_size, alpha=alpha, **common)
    return sequences[:, 0]
  if method == "greedy":
    return greedy_search(step_for(1), cache, **common)
  if method == "sample":
    return sample(step_for(1), cache, rng, temperature=temperature, top_k=top_k, top_p=top_p, **common)
  raise ValueError(f"unknown decoding method '{method}'; known: {METHODS}")
