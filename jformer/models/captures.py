"""The per-token tensors an attention variant captures from its layer's input (`jformer.attention.Capture`):
computed for `MultiHeadAttention` at its queries and keys, the key side kept in the decode cache beside the keys.

Cache entries (the 'cache' collection, per attention): `captured_<name>` the key side of every slot (a full decode
state) or of the last W positions (a window state), `captured_total_<name>` the running sum of a cumulative capture
up to the last step. Each has a leading batch axis, so beam search reorders it with the keys.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jformer.attention import AttentionVariant
from jformer.attention.decode_state import DecodeState


def compute(module: nn.Module, variant: AttentionVariant, options: dict, masking: dict, inputs_q_BxTxD: jax.Array,
            inputs_kv_BxSxD: jax.Array | None, *, decode: bool, state: DecodeState | None) -> dict:
  """The variant's `captures=`: {"q": {name: `[B, T, ...]`}, "kv": {name: `[B, S, ...]`}} (a capture read at the
  queries only, `Capture.queries_only`, at the queries alone).

  Queries take the capture of their own input; keys that of theirs (the encoder output in encoder-decoder
  attention), or, in self-attention while decoding (`state`: the variant's decode state), what the cache holds of
  every slot the keys come from (a recurrent state's step reads the new tokens only: theirs). A cumulative capture
  restarts at each example of a packed row (`masking`: the call's, with its segment ids, positions and `params`)
  and continues from the running sum of the earlier decode steps.
  """
  params, captured = masking.get("params"), {"q": {}, "kv": {}}
  for name, capture in sorted(variant.captures.items()):
    if capture.cumulative and decode:
      at_queries = _running_sum(module, name, jnp.asarray(capture.fn(inputs_q_BxTxD, params), jnp.float32))
    else:
      at_queries = capture.values(inputs_q_BxTxD, params, masking["q_segment_ids"])
    captured["q"][name] = at_queries
    if capture.queries_only:  # nothing at the keys, nothing cached.
      continue
    if inputs_kv_BxSxD is not None:
      captured["kv"][name] = capture.values(inputs_kv_BxSxD, params, masking["kv_segment_ids"])
    elif state is None or state.kind == "recurrent":  # a recurrent state keeps what it needs of the keys itself.
      captured["kv"][name] = at_queries
    elif state.kind == "window":
      captured["kv"][name] = _window_cache(module, name, at_queries, state.window_size(options, variant.options))
    else:
      captured["kv"][name] = _full_cache(module, name, at_queries, masking["q_positions"])
  return captured


def _running_sum(module: nn.Module, name: str, values_BxTx: jax.Array) -> jax.Array:
  """The running sum over every decode step so far, through each of the T new tokens (`[B, T, ...]`); keeps its
  last value."""
  initialized = module.has_variable("cache", f"captured_total_{name}")
  total = module.variable("cache", f"captured_total_{name}", jnp.zeros, values_BxTx.shape[:1] + values_BxTx.shape[2:],
                          jnp.float32)
  summed = total.value[:, None] + jnp.cumsum(values_BxTx, axis=1)
  if initialized:  # the call that creates the cache (`init`) only shapes it.
    total.value = summed[:, -1]
  return summed


def _full_cache(module: nn.Module, name: str, new_BxTx: jax.Array, positions_BxT: jax.Array) -> jax.Array:
  """Writes the T new values at their slots (as `attention_cache.full` writes keys) and returns every
  slot's `[B, S, ...]`."""
  initialized = module.has_variable("cache", f"captured_{name}")
  cached = module.variable("cache", f"captured_{name}", jnp.zeros_like, new_BxTx)  # `init`: the decode length.
  if not initialized:
    return new_BxTx
  cached.value = jax.lax.dynamic_update_slice_in_dim(cached.value, new_BxTx.astype(cached.value.dtype),
                                                     positions_BxT[0, 0], axis=1)
  return cached.value


def _window_cache(module: nn.Module, name: str, new_BxTx: jax.Array, window: int) -> jax.Array:
  """The W kept and the T new values `[B, W + T, ...]` (the slots `attention_cache.window` returns);
  keeps the last W."""
  initialized = module.has_variable("cache", f"captured_{name}")
  cached = module.variable("cache", f"captured_{name}", jnp.zeros, (new_BxTx.shape[0], window) + new_BxTx.shape[2:],
                           jnp.float32)
  joined = jnp.concatenate([cached.value, new_BxTx.astype(jnp.float32)], axis=1)
  if initialized:
    cached.value = joined[:, -window:]
  return joined
