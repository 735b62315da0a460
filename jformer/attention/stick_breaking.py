"""`stick_breaking`: stick-breaking attention (Tan et al. 2024, "Scaling Stick-Breaking Attention"), no softmax: each
query breaks a stick of length 1 over the keys before it, the nearest first, so order and recency are built in and no
positional encoding is needed.

    z_ij = q_i . k_j / sqrt(d),   beta_ij = sigmoid(z_ij)
    A_ij = beta_ij prod_{j < k < i} (1 - beta_ik)       the keys between key j and query i take their shares first
    o_i  = sum_{j < i} A_ij v_j

in log space, as the paper computes it: log A_ij = log sigmoid(z_ij) - sum_{j < k < i} softplus(z_ik) (since log(1 -
sigmoid(z)) = -softplus(z)), the sum a reverse cumulative sum along the keys. A query's weights sum to at most 1: the
stick left, prod_{j < i} (1 - beta_ij), goes to no value (the paper's equation; its code returns that remainder
beside the output, which its model adds times a learned vector). `attend_current=True` (the authors' kernel's flag)
lets the query's own token break the stick first: j <= i, the product over j < k <= i.

Which keys: those the call's masking leaves visible to the query (causal masking, segment ids, window, mask), before
it by position (attend_current: up to it), broken in key index order from the last one back; the model's rows, packed
or not, and its decode cache hold keys in position order. Causal only: without causal masking (an encoder,
cross-attention) the keys have no order towards the query, so such a call is refused (at load, for a model that
would make one). Dense: `[B, H, T, S]` weights in memory, as `dot_product` (the paper's kernel is blockwise).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.attention.registry import register
from jformer.ops import masks
from jformer.ops.attention import dot_product_logits


def _visible(q_len: int, kv_len: int, attend_current, masking) -> jax.Array:
  """`[B or 1, 1, T, S]` bool: the keys the masking leaves visible, before the query's position unless
  `attend_current` (then up to it)."""
  if not isinstance(attend_current, bool):
    raise ValueError(f"attention variant 'stick_breaking': attend_current must be True or False, got "
                     f"{attend_current!r} (model.attention_options.attend_current)")
  visible = masks.attention_mask(q_len, kv_len, **masking)
  if attend_current:
    return visible
  positions = lambda given, length: jnp.arange(length) if given is None else given
  before = masks.causal_mask(positions(masking.get("q_positions"), q_len) - 1,
                             positions(masking.get("kv_positions"), kv_len))
  return masks.combine_masks(visible, before)


def stick_breaking_weights(query, key, *, attend_current: bool = False, bias=None, logits_softcap=0.0,
                           **masking) -> jax.Array:
  """A_ij = beta_ij prod_k (1 - beta_ik) over the visible keys k after key j, `[B, H, T, S]` float32 (0 for a hidden
  key): what the query applies to the values; a row sums to at most 1. beta = sigmoid of the logits (soft-capped,
  plus the bias)."""
  visible = _visible(query.shape[1], key.shape[1], attend_current, masking)
  logits_BxHxTxS = dot_product_logits(query, key, bias=bias, softcap=logits_softcap)
  log_rest_BxHxTxS = jnp.where(visible, -jax.nn.softplus(logits_BxHxTxS), 0.0)  # log(1 - beta) of visible keys
  # sum over the keys after j: the reverse cumulative sum from j + 1 (no subtraction, so no cancellation).
  after_BxHxTxS = jnp.pad(jax.lax.cumsum(log_rest_BxHxTxS[..., 1:], axis=3, reverse=True), [(0, 0)] * 3 + [(0, 1)])
  return jnp.where(visible, jnp.exp(jax.nn.log_sigmoid(logits_BxHxTxS) + after_BxHxTxS), 0.0)


def _limits(query, key, value, *, causal=False, **masking) -> str | None:
  """Why a call has no order to break the stick in: it is not causal."""
  del query, key, value, masking
  if not causal:
    return ("stick-breaking attention is causal (each query breaks its stick over the keys before it, the nearest "
            "first); a call without causal masking (an encoder, cross-attention) gives its keys no such order")
  return None


@register("stick_breaking", supports={"causal", "segment_ids", "positions", "mask", "bias", "decode", "softcap",
                                      "window"},
          weights=stick_breaking_weights, limits=_limits)
def stick_breaking(query, key, value, *, dropout_rate=0.0, dropout_rng=None, attend_current: bool = False, **masking):
  """Stick-breaking attention (Tan et al. 2024): o_i = sum_{j<i} sigmoid(z_ij) prod_{j<k<i} (1 - sigmoid(z_ik)) v_j.

  z_ij = q_i . k_j / sqrt(d) (soft-capped, plus the bias, when the call gives them), over the keys visible to query
  i before it by position, broken from the nearest back (module doc); computed in log space, dense.

  Args:
    query `[B, T, H, D]`, key `[B, S, H, D]`, value `[B, S, H, Dv]` (fewer key/value heads are repeated by the
    registry), the masking arguments of the variant signature (`jformer/attention/__init__.py`), causal.
    attend_current: option, False (the paper: keys before the query) or True (the query's own key too, first).

  Returns:
    `[B, T, H, Dv]` in the query dtype (0 for a query that sees no key).
  """
  del dropout_rate, dropout_rng  # not declared: the registry refuses dropout before calling.
  weights_BxHxTxS = stick_breaking_weights(query, key, attend_current=attend_current, **masking)
  return jnp.einsum("bhts,bshd->bthd", weights_BxHxTxS, value.astype(jnp.float32)).astype(query.dtype)
