"""Today's attention features re-expressed as flex variants (`jformer.attention.flex`), each registered with today's
implementation as its `reference=`, so that the variant matrix (tests/test_attention_flex.py) checks the flex
engine against it, forward and gradients (parameters included), in every setting and in cached decoding:

  flex_alibi      ALiBi's bias (`ops.positional.alibi_bias`, the `alibi` encoding's), its slopes as parameters
  flex_relative   T5's relative position bias (the `relative` encoding's function), its table as the parameter
  flex_softcap    the logit soft-cap (`logits_softcap`, `ops.softcap.soft_cap`)
  flex_window     the sliding window of `local` (`window=`)
  flex_prefix_lm  prefix-LM masking, a prefix seen both ways and causal after it (today: a `mask=`)

Document masking is every call's segment ids; tests/test_attention_flex.py re-expresses it with a capture.
"""

import jax.numpy as jnp

from jformer import positional as encodings
from jformer.attention import flex, softmax_weights
from jformer.attention.local import window_of
from jformer.ops import masks
from jformer.ops.attention import dot_product_weights
from jformer.ops.positional import alibi_bias, relative_position_buckets
from jformer.ops.softcap import soft_cap
from jformer.positional.relative import TABLE
from jformer.registry import Param, constant

MASKING = ("causal", "q_segment_ids", "kv_segment_ids", "q_positions", "kv_positions", "mask", "bias", "window",
           "logits_softcap")


def today(query, key, value, **kwargs):
  """Today's dot-product attention of the call (`softmax_weights`, the weights of `dot_product`) times the values;
  keyword arguments other than the masking ones (options, dropout) are ignored."""
  weights = softmax_weights(query, key, **{k: v for k, v in kwargs.items() if k in MASKING})
  return jnp.einsum("bhts,bshd->bthd", weights, value.astype(jnp.float32)).astype(query.dtype)


def positions(query, key, kwargs):
  """The call's query and key positions, `arange` where it gives none."""
  given = lambda name, length: jnp.arange(length)[None] if kwargs.get(name) is None else kwargs[name]
  return given("q_positions", query.shape[1]), given("kv_positions", key.shape[1])


def with_bias(kwargs, added):
  return dict(kwargs, bias=added if kwargs.get("bias") is None else kwargs["bias"] + added)


def alibi(score, b, h, q_idx, kv_idx, *, params):
  """ALiBi (Press et al. 2022): the logits minus m_h |i - j|, the slopes as parameters."""
  return score - params["slopes"][h] * jnp.abs(q_idx - kv_idx)


def alibi_reference(query, key, value, *, params, **kwargs):
  bias = alibi_bias(params["slopes"], *positions(query, key, kwargs), causal=kwargs.get("causal", False))
  return today(query, key, value, **with_bias(kwargs, bias))


def relative(score, b, h, q_idx, kv_idx, *, params, causal, num_buckets: int = 8, max_distance: int = 16):
  """T5's relative position bias (Raffel et al. 2020): a learned scalar per head and bucket of j - i."""
  buckets = relative_position_buckets(kv_idx - q_idx, bidirectional=not causal, num_buckets=num_buckets,
                                      max_distance=max_distance)
  return score + params["relative_embedding"][buckets, h]


def relative_reference(query, key, value, *, params, num_buckets=8, max_distance=16, **kwargs):
  bias = encodings.get("relative").fn(*positions(query, key, kwargs), causal=kwargs.get("causal", False), dims={},
                                      params=params, num_buckets=num_buckets, max_distance=max_distance)
  return today(query, key, value, **with_bias(kwargs, bias))


def capped(score, b, h, q_idx, kv_idx, *, cap: float = 2.0):
  """The logit soft-cap cap * tanh(score / cap) (Gemma 2), as a function."""
  return cap * jnp.tanh(score / cap)


def capped_reference(query, key, value, *, cap=2.0, **kwargs):
  """`logits_softcap=cap`; where the call has a cap of its own, `soft_cap` applied to its capped logits."""
  if not kwargs.get("logits_softcap"):
    return today(query, key, value, **dict(kwargs, logits_softcap=cap))
  visible = masks.attention_mask(query.shape[1], key.shape[1],
                                 **{k: kwargs.get(k) for k in MASKING if k not in ("bias", "logits_softcap")})
  weights = dot_product_weights(query, key, mask=visible, bias=kwargs.get("bias"), softcap=kwargs["logits_softcap"],
                                score_mod=lambda s: soft_cap(s, cap))
  return jnp.einsum("bhts,bshd->bthd", weights, value.astype(jnp.float32)).astype(query.dtype)


def window(b, h, q_idx, kv_idx, *, window_size: int = 3):
  """The sliding window of `local`: |i - j| < window_size."""
  return jnp.abs(q_idx - kv_idx) < window_size


def window_reference(query, key, value, *, window_size=3, **kwargs):
  left, right = window_of(window_size)
  given = kwargs.get("window") or (left, right)
  return today(query, key, value, **dict(kwargs, window=(min(left, given[0]), min(right, given[1]))))


def prefix_lm(b, h, q_idx, kv_idx, *, prefix_length: int = 3):
  """Prefix-LM: the first prefix_length positions seen by every query (both ways), causal after them."""
  return (kv_idx < prefix_length) | (kv_idx <= q_idx)


def prefix_lm_reference(query, key, value, *, prefix_length=3, **kwargs):
  q_positions, kv_positions = positions(query, key, kwargs)
  prefix = (kv_positions[:, None, None, :] < prefix_length) | masks.causal_mask(q_positions, kv_positions)
  mask = prefix if kwargs.get("mask") is None else kwargs["mask"] & prefix
  return today(query, key, value, **dict(kwargs, mask=mask))


flex.register("flex_alibi", score_mod=alibi, params={"slopes": Param(("heads",), constant(0.25))},
              reference=alibi_reference)
flex.register("flex_relative", score_mod=relative, params={"relative_embedding": TABLE}, reference=relative_reference)
flex.register("flex_softcap", score_mod=capped, reference=capped_reference)
flex.register("flex_window", mask_mod=window, reference=window_reference)
flex.register("flex_prefix_lm", mask_mod=prefix_lm, reference=prefix_lm_reference)
