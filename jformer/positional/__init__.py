"""Positional encodings, looked up by name from `model.positional`, each declaring how it acts.

An encoding acts in one of four ways (`registry.ACTS`); its function, by kind:

    "embedding"  fn(positions, *, dims, params, **options) -> [B or 1, L, D]
                 added to the token embeddings (before dropout) of each stack; positions `[B or 1, L]`.
    "rotary"     fn(x, positions, *, dims, params, **options) -> [B, L, H, K]
                 applied to self-attention queries `[B, T, H, K]` and keys `[B, S, G, K]` with their positions
                 `[B or 1, L]` (keys before they enter the decoding cache).
    "bias"       fn(q_positions, kv_positions, *, causal, dims, params, **options) -> [B or 1, H, T, S] float32
                 added to self-attention logits through the attention variant's `bias` argument; positions
                 `[B or 1, T]`, `[B or 1, S]`; `causal`: decoder self-attention. One module per stack computes
                 it, shared by the stack's layers.
    "none"       no function: no positional information.

- Positions are per example (packed rows restart at 0); in a decode step they are the step (queries) and
  `arange(S)` (the cache's slots).
- `dims`: the model's dimensions by name: d_model, heads, kv_heads, head_dim, max_length.
- `params`: the encoding's learned parameters, name -> array, as it declares them (`register(params=...)`,
  `jformer.registry.Param`, shapes from dims and option names); float32.
- `options`: its keyword-only parameters with their defaults, bound from `model.positional_options`.

The model reads `acts` and nothing else of an encoding (no if-chains on names); the config is checked at load
(`get(name).check(dims, options)`: unknown options, the encoding's own requirements, parameter shapes), and
an encoding that acts "bias" asks the attention variant for "bias".

To add one: one file here with `@register("name", acts=..., params=..., check=..., example_options=...)` on a
function of the signature above. Every module of this package is imported below, so nothing else is edited;
tests/test_models_positional.py runs every registered encoding through the model's invariances (causality,
cached decoding, packing, padding).
"""

import importlib
import pkgutil

from jformer.positional.registry import ACTS, REGISTRY, PositionalEncoding, available, get, register

# Registration: importing each module of this package runs its `@register(...)` lines.
for _module in pkgutil.iter_modules(__path__):
  importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ACTS", "REGISTRY", "PositionalEncoding", "available", "get", "register"]
