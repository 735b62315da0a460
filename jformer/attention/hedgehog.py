"""`hedgehog`: linear attention with a learned feature map (Zhang et al. 2024, Hedgehog; the map LoLCATs trains to
turn a pretrained softmax layer into a linear one, `train.attention_transfer`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.attention.linear import attend_features, feature_weights
from jformer.attention.registry import register
from jformer.registry import Param


def _identity(key, shape, dtype=jnp.float32):
  """I per head: at initialisation the map is softmax(x) (+) softmax(-x) of the head's own features."""
  del key
  return jnp.broadcast_to(jnp.eye(shape[-1], dtype=dtype), shape)


PARAMS = {name: Param(("heads", "head_dim", "head_dim"), _identity, axes=("heads", "head_dim", None))
          for name in ("query_map", "key_map")}


def feature_map(x_BxLxHxK: jax.Array, map_HxKxF: jax.Array) -> jax.Array:
  """phi(x) = softmax(x W_h) (+) softmax(-x W_h) over the F features (Hedgehog eq. 5): positive, `[B, L, H, 2F]`,
  float32; spiky like the softmax it imitates (exponentials), where elu + 1 is flat."""
  z_BxLxHxF = jnp.einsum("blhk,hkf->blhf", x_BxLxHxK.astype(jnp.float32), map_HxKxF.astype(jnp.float32))
  return jnp.concatenate([jax.nn.softmax(z_BxLxHxF, -1), jax.nn.softmax(-z_BxLxHxF, -1)], -1)


def hedgehog_weights(query, key, *, params, chunk_size=None, bias=None, **masking):
  """The weights it applies to the values, `[B, H, T, S]`: phi_q(q_i).phi_k(k_j) over the visible j, normalised."""
  del chunk_size, bias
  return feature_weights(feature_map(query, params["query_map"]), feature_map(key, params["key_map"]), **masking)


@register("hedgehog", supports={"causal", "segment_ids", "positions"}, params=PARAMS, weights=hedgehog_weights,
          example_options=dict(chunk_size=4))
def hedgehog(query, key, value, *, params, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
             kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, chunk_size=128):
  """Linear attention with learned feature maps: out_i = sum_j phi_q(q_i).phi_k(k_j) v_j / sum_j phi_q(q_i).phi_k(k_j).

  phi(x) = softmax(x W_h) (+) softmax(-x W_h) with a `[head_dim, head_dim]` W_h per head, one for queries and one
  for keys (Zhang et al. 2024, eq. 5), starting at the identity; computed as `linear` (chunks with a running state
  when causal: time and memory linear in length). It does not decode yet: its recurrent state would need the
  maps (`jformer.attention.decode_state.recurrent` steps take no parameters).

  Args:
    query `[B, T, H, D]`, key `[B, S, H, D]`, value `[B, S, H, Dv]`, params {"query_map", "key_map": [H, D, D]},
    the masking arguments of the variant signature; chunk_size: option, a positive int.

  Returns:
    `[B, T, H, Dv]` in the query dtype.
  """
  del mask, bias, dropout_rate, dropout_rng  # not declared: the registry refuses them before calling.
  return attend_features(feature_map(query, params["query_map"]), feature_map(key, params["key_map"]), value,
                         causal=causal, q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids,
                         q_positions=q_positions, kv_positions=kv_positions, chunk_size=chunk_size
                         ).astype(query.dtype)
