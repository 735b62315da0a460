"""Attention variants behind one signature, looked up by name from `model.attention`.

Every variant is a pure function

    fn(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None,
       q_positions=None, kv_positions=None, mask=None, bias=None,
       dropout_rate=0.0, dropout_rng=None, [logits_softcap=0.0,] [window=None,] **options) -> out

- query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]`, out `[B, T, H, Dv]`. K = H, or fewer
  key/value heads with H % K == 0 (grouped-query attention; K = 1: multi-query): query head h uses key/value
  head h // (H / K). Every registered variant accepts K < H: `get(name).fn` repeats the key/value heads
  (`repeat_kv`) for a variant that does not declare "gqa", which is what that declaration means.
- Key j is visible to query i iff: segment ids (`[B, T]`, `[B, S]`, 0 = padding) are equal and non-zero,
  when given; position(j) <= position(i) when `causal` (positions `[B, T]`/`[B, S]`, default `arange`);
  position(i) - left <= position(j) <= position(i) + right for `window=(left, right)`, when given (a sliding
  window: `local`); and the boolean `mask` (broadcastable to `[B, H, T, S]`) is True, when given.
- `bias` (broadcastable to `[B, H, T, S]`) is added to the logits; `dropout_rate`/`dropout_rng` drop attention
  weights. `logits_softcap` > 0 caps the logits before the bias: cap * tanh(logits / cap) (Gemma 2). Only a
  variant that declares "softcap" (or "window") takes (and sees) `logits_softcap` (or `window`): a variant
  written before these existed keeps its signature.
- A decode step is T=1 against a cache of S slots, with q_positions = the step and kv_positions = arange(S);
  slots after the step may hold anything: causal masking by position hides them.
- `options` are the variant's own keyword-only parameters, bound from `model.attention_options`.

A variant declares what it supports (`registry.FEATURES`); the model asks for what its use needs (training
needs what the layers ask for; decoding adds "decode"), so an unsupported use fails early, naming it, and
`get(name).fn` refuses a call that asks for an undeclared feature (a mask, a bias, dropout, ...), naming it. A
kernel that takes a feature only in some form or shape (T == S, half precision, ...) also declares `limits`,
checked at each call. The library kernels (`cudnn` on NVIDIA GPUs, `splash` on TPU, `pallas_gpu` on GPU) declare
their `platforms` and `auto_priority`; they run no decode steps and mask by index, not by position, so the model
takes them through `auto`, which picks the highest-priority one that can express each call and falls back,
logged, where none can. A kernel that runs per device on a mesh takes a `mesh` argument (`jformer.axes.Placement`).

To add one: one file here (or a file of your own, `--config.imports=`) with `@register("name", supports={...},
weights=...)` on a function of the signature above (its extra keyword-only parameters are its options;
`weights=` its attention weights: `softmax_weights` for softmax attention; or `reference=` its explicit formula
when it has no weights), and its test. Most softmax variants are shorter as flex mods, `flex.register("name",
score_mod=..., mask_mod=...)` (`jformer.attention.flex`). A variant may read learned parameters (`params=`, passed
as `params={name: array}`) and per-token tensors the model computes from the layer input (`captures=`, passed as
`captures={"q": {...}, "kv": {...}}`, `jformer.attention.capture`). Every module of this package is imported below, so nothing else is edited;
tests/test_attention_variants.py runs every registered variant against its reference in every setting it
declares.
"""

import importlib
import pkgutil

from jformer.attention.capture import Capture
from jformer.attention.registry import (FEATURES, REGISTRY, AttentionVariant, available, get, kernels, register,
                                        repeat_kv, softmax_weights)

# Registration: importing each module of this package runs its `@register(...)` lines.
for _module in pkgutil.iter_modules(__path__):
  importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["FEATURES", "REGISTRY", "AttentionVariant", "Capture", "available", "get", "kernels", "register",
           "repeat_kv", "softmax_weights"]
