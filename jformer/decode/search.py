"""One entry point over the decoding methods (`METHODS`), for the callers that pick one by name from a config, and
the one check of their options (`check_options`: ranges, and options given for a method that does not use them)."""

from __future__ import annotations

import math
from typing import Callable, Iterable, Mapping

import jax

from jformer.decode.beam_search import beam_search
from jformer.decode.common import PyTree, TokensToLogits
from jformer.decode.greedy import greedy_search
from jformer.decode.sampling import sample

METHODS = ("beam", "greedy", "sample")
# The options only one method reads.
METHOD_OPTIONS = {"beam": ("beam_size", "alpha"), "greedy": (), "sample": ("temperature", "top_k", "top_p")}
# Each option's allowed values, as a test and how to say it.
RANGES = {
    "beam_size": (lambda v: _whole(v) and v >= 1, "a whole number >= 1"),
    "alpha": (lambda v: _finite(v) and v >= 0, "a finite number >= 0"),
    "temperature": (lambda v: _finite(v) and v > 0, "a finite number > 0"),
    "top_k": (lambda v: _whole(v) and v >= 0, "a whole number >= 0 (0 = off)"),
    "top_p": (lambda v: _finite(v) and 0 < v <= 1, "a number in (0, 1] (1 = off)"),
    "batch_size": (lambda v: _whole(v) and v >= 1, "a whole number >= 1"),
    "max_new_tokens": (lambda v: _whole(v) and v >= 1, "a whole number >= 1"),
}


def check_options(method: str, options: Mapping[str, object], *, given: Iterable[str] = (), prefix: str = "--") -> None:
  """Refuses, in one ValueError naming each problem, an unknown `method`, an option value out of its range
  (`RANGES`), and an option in `given` (set explicitly by the user) that `method` does not read (e.g. a temperature
  for greedy search: silently ignored, it would hide a mistake). `prefix` names options as the user wrote them
  (`--` for flags, `decode.` for config keys)."""
  if method not in METHODS:
    raise ValueError(f"unknown decoding method '{method}'; give one of {', '.join(METHODS)}")
  problems = [f"{prefix}{name}={value!r} must be {RANGES[name][1]}" for name, value in options.items()
              if name in RANGES and value is not None and not RANGES[name][0](value)]
  for name in sorted(set(given)):
    owner = next((m for m, names in METHOD_OPTIONS.items() if name in names), None)
    if owner is not None and owner != method:
      problems.append(f"{prefix}{name} is read by method '{owner}' only, not by '{method}' (drop it, or use "
                      f"{prefix}method={owner})")
  if problems:
    raise ValueError("; ".join(problems))


def _finite(value) -> bool:
  return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


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
