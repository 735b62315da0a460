"""What `MultiHeadAttention` keeps in the 'cache' collection while decoding, as variables of the attention module:
self-attention's decode state (`jformer.attention.decode_state`: every key and value, a window's, or a recurrent
variant's own state) and encoder-decoder attention's projected encoder output. The call that creates an entry
(`init`) only shapes it. Keys and values are kept heads-major (`heads_major`)."""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from jformer.attention import decode_state as decode_state_lib
from jformer.attention import repeat_kv

# Names of the encoder-decoder keys and values kept while decoding: projected once from the encoder output, then
# fixed (`decode.translator` keeps them out of beam reordering).
CROSS_KEY = "cross_key"
CROSS_VALUE = "cross_value"


def heads_major(x: jax.Array) -> jax.Array:
  """`[B, L, G, K]` <-> `[B, G, L, K]` (its own inverse). Caches are stored heads-major, the layout the attention
  matmuls read: XLA cancels the transpose back, instead of copying the whole cache at every decode step."""
  return jnp.swapaxes(x, 1, 2)


def cross(module: nn.Module, project_kv: Callable) -> tuple[jax.Array, jax.Array]:
  """Encoder-decoder keys and values `[B, S, G, K]` while decoding: projected once (`project_kv()`), when the cache
  is created (the encoder output does not change while decoding; projecting it at every step would cost 2 S d^2
  per layer and row, most of a step's work), then read from the cache.

  The cache is created by the call that finds it missing: `init` (shapes only), or `apply` with
  `mutable=["cache"]` and no cache, which projects with the given parameters (`decode.translator.init_cache`).
  """
  if not module.has_variable("cache", CROSS_KEY):
    key_BxSxGxK, value_BxSxGxK = project_kv()
    module.variable("cache", CROSS_KEY, heads_major, key_BxSxGxK)
    module.variable("cache", CROSS_VALUE, heads_major, value_BxSxGxK)
    return key_BxSxGxK, value_BxSxGxK
  return heads_major(module.get_variable("cache", CROSS_KEY)), heads_major(module.get_variable("cache", CROSS_VALUE))


def full(module: nn.Module, key_BxTxGxK, value_BxTxGxK, positions_BxT):
  """The FULL decode state: writes this step's keys/values into the cache; returns the whole cache `[B, S, G, K]`
  and its slot positions `[1, S]`."""
  initialized = module.has_variable("cache", "cached_key")
  cached_key = module.variable("cache", "cached_key", jnp.zeros_like, heads_major(key_BxTxGxK))
  cached_value = module.variable("cache", "cached_value", jnp.zeros_like, heads_major(value_BxTxGxK))
  if not initialized:  # `init` shapes the cache with the full decode length; nothing to attend to yet.
    return key_BxTxGxK, value_BxTxGxK, positions_BxT
  start = positions_BxT[0, 0]
  cached_key.value = jax.lax.dynamic_update_slice_in_dim(cached_key.value, heads_major(key_BxTxGxK), start, axis=2)
  cached_value.value = jax.lax.dynamic_update_slice_in_dim(cached_value.value, heads_major(value_BxTxGxK), start,
                                                           axis=2)
  slots = cached_key.value.shape[2]
  # Slots past the current step hold zeros; causal masking by position hides them.
  return heads_major(cached_key.value), heads_major(cached_value.value), jnp.arange(slots)[None, :]


def window(module: nn.Module, key_BxTxGxK, value_BxTxGxK, positions_BxT, size: int):
  """A window decode state (`jformer.attention.decode_state.window`): returns the W = `size` cached and the T new
  keys, values `[B, W + T, G, K]` and their positions (slots never written: `EMPTY_POSITION`, after every query, so
  causal masking hides them), and keeps the last W of them, heads-major `[B, G, W, K]`: memory O(W)."""
  batch, _, kv_heads, head_dim = key_BxTxGxK.shape
  initialized = module.has_variable("cache", "cached_key")
  cached_key = module.variable("cache", "cached_key", jnp.zeros, (batch, kv_heads, size, head_dim), key_BxTxGxK.dtype)
  cached_value = module.variable("cache", "cached_value", jnp.zeros, (batch, kv_heads, size, value_BxTxGxK.shape[-1]),
                                 value_BxTxGxK.dtype)
  cached_positions = module.variable("cache", "cached_positions", jnp.full, (batch, size),
                                     decode_state_lib.EMPTY_POSITION, jnp.int32)
  keys, kept_keys = decode_state_lib.with_new_keys(cached_key.value, key_BxTxGxK)
  values, kept_values = decode_state_lib.with_new_keys(cached_value.value, value_BxTxGxK)
  positions = jnp.concatenate([cached_positions.value, positions_BxT.astype(jnp.int32)], axis=1)
  if initialized:  # the call that creates the state (`init`) only shapes it.
    cached_key.value, cached_value.value, cached_positions.value = kept_keys, kept_values, positions[:, -size:]
  return heads_major(keys), heads_major(values), positions


def recurrent(module: nn.Module, state: decode_state_lib.DecodeState, query_BxTxHxK, key_BxTxGxK, value_BxTxGxK,
              options: dict, arguments: dict) -> jax.Array:
  """A recurrent decode state (`jformer.attention.decode_state.recurrent`): the variant's `step` on the T new
  tokens (key/value heads repeated to H) after its kept state, which it updates: memory O(1) in the length. The
  step also gets the variant's declared `params` and its `captures` of the new tokens, from `arguments` (the call's
  keyword arguments, `MultiHeadAttention._arguments`), where it declares them. Returns its output `[B, T, H, K]`."""
  batch, _, heads, head_dim = query_BxTxHxK.shape
  initialized = module.has_variable("cache", "state")
  kept = module.variable("cache", "state", state.init, batch, heads, head_dim, value_BxTxGxK.shape[-1])
  key_BxTxHxK, value_BxTxHxK = (repeat_kv(x, heads) for x in (key_BxTxGxK, value_BxTxGxK))
  declared = {name: arguments[name] for name in ("params", "captures") if name in arguments}
  out_BxTxHxK, updated = state.step(kept.value, query_BxTxHxK, key_BxTxHxK, value_BxTxHxK, **declared, **options)
  if initialized:  # the call that creates the state (`init`) only shapes it.
    kept.value = updated
  return out_BxTxHxK
