"""Attention variants behind one signature, looked up by name from `model.attention`.

Every variant is a pure function

    fn(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None,
       q_positions=None, kv_positions=None, mask=None, bias=None,
       dropout_rate=0.0, dropout_rng=None, **options) -> out

- query `[B, T, H, D]`, key/value `[B, S, H, D]`, out `[B, T, H, D]`.
- Key j is visible to query i iff: segment ids (`[B, T]`, `[B, S]`, 0 = padding) are equal and non-zero,
  when given; position(j) <= position(i) when `causal` (positions `[B, T]`/`[B, S]`, default `arange`);
  and the boolean `mask` (broadcastable to `[B, H, T, S]`) is True, when given.
- `bias` is added to the logits; `dropout_rate`/`dropout_rng` drop attention weights.
- A decode step is T=1 against a cache of S slots, with q_positions = the step and kv_positions = arange(S).

A variant declares what it supports (`registry.FEATURES`); the model asks for what it needs at config load,
so an unsupported request fails early. To add one: one file here with `@register(...)` on the function,
one import line below, and its test.
"""

from jformer.attention.registry import FEATURES, AttentionVariant, available, get, register

# Registration lines: importing a variant's module registers it.
from jformer.attention import dot_product  # noqa: E402,F401
from jformer.attention import xla  # noqa: E402,F401

__all__ = ["FEATURES", "AttentionVariant", "available", "get", "register"]
