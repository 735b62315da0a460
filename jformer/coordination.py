"""Work done once on process 0 and its outcome shared with every process, through JAX's coordination service (its
key-value store and barriers: host-to-host messages, no device collective, so a wait can last hours).

    problem = process_0_decides("verify", lambda: integrity.verify(folder))   # every process: the same answer
    process_0_decides("inputs", lambda: check_run_inputs(config, workdir))      # ...or the same one-line error

`process_0_decides` runs work on process 0 only (a check that reads many files: a checkpoint's manifest, every line
of a corpus; or a preparation the others then reuse) while the others wait, and gives every process its outcome:
each returns the same value or raises the same one-line error. With one process it is a plain call. Names must be
the same on every process (every process calls in the same order; a counter keeps repeated names apart).

This module sits below every layer of jformer and imports none of it.
"""

from __future__ import annotations

import collections
import json
from typing import Callable, TypeVar

import jax

T = TypeVar("T")

DECIDE_TIMEOUT_S = 3600  # a check of every file of a checkpoint or corpus.
PREPARE_TIMEOUT_S = 6 * 3600  # a WMT-sized data preparation on process 0 takes well over an hour.
_CALLS: collections.Counter = collections.Counter()
# The errors that cross to the other processes as the same one line (what the commands print as `error: ...`).
SHARED_ERRORS = {"ValueError": ValueError, "FileNotFoundError": FileNotFoundError, "KeyError": KeyError}


def _client():
  from jax._src import distributed  # the coordination service's client: JAX-internal, as preemption's is.

  return distributed.global_state.client


def _key(name: str) -> str:
  _CALLS[name] += 1
  return f"jformer/{name}/{_CALLS[name]}"


def process_0_decides(name: str, fn: Callable[[], T], *, timeout_s: float = DECIDE_TIMEOUT_S) -> T:
  """`fn()` on process 0; every process returns its (JSON-serialisable) result, or raises the error it raised (one
  of SHARED_ERRORS, with the same message). With one process, just `fn()`."""
  if jax.process_count() == 1:
    return fn()
  key = _key(name)
  if jax.process_index() == 0:
    try:
      result = fn()
    except tuple(SHARED_ERRORS.values()) as e:
      _client().key_value_set(key, json.dumps({"error": type(e).__name__, "message": e.args[0] if e.args else ""}))
      raise
    _client().key_value_set(key, json.dumps({"result": result}))
    return result
  outcome = json.loads(_client().blocking_key_value_get(key, int(timeout_s * 1000)))
  if "error" in outcome:
    raise SHARED_ERRORS[outcome["error"]](outcome["message"])
  return outcome["result"]

