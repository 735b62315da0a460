"""The normalization layers of a block (`model.normalization`), by name: a registry, so a plug-in adds its own.

A norm registers a function (or a Flax Module class) `make(*, use_bias: bool, name: str) -> nn.Module` whose module
normalizes `[..., F]` over its last axis, whatever F: d_model for the sublayer norms and the final norm, head_dim for
QK-norm (`model.qk_norm`). `use_bias` is `model.use_bias` (a norm without a bias ignores it); a norm that also takes
`epsilon` gets `model.norm_epsilon`. The built-in ones keep
float32 parameters whose axis is the logical 'norm' (replicated), and compute in float32 (their parameters' dtype).

    @norms.register("my_norm")
    def my_norm(*, use_bias, name):
      \"\"\"One line for `jformer list normalization`.\"\"\"
      return MyNorm(use_bias=use_bias, name=name)
"""

from __future__ import annotations

import inspect
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from jformer import axes
from jformer.registry import Registry, caller

EPSILON = 1e-6  # flax's default for both, the value the paper configs have always used.


def _declare(name: str, make: Callable) -> Callable:
  """The entry of a norm: `make` itself, once it is known to take `use_bias` and `name`."""
  if not callable(make):
    raise ValueError(f"normalization '{name}' must be a function or a Module class, got {make!r}")
  parameters = inspect.signature(make).parameters
  takes_rest = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
  lacking = sorted({"use_bias", "name"} - set(parameters))
  if lacking and not takes_rest:
    raise ValueError(f"normalization '{name}' must accept the keyword arguments {lacking}: make(*, use_bias, name)")
  return make


REGISTRY: Registry[Callable] = Registry("normalization", declare=_declare)


def register(name: str):
  """Decorator: `@register("my_norm")` above `make(*, use_bias, name) -> nn.Module` (module doc)."""
  return REGISTRY.register(name, origin=caller())


def get(name: str) -> Callable:
  """The `make` function registered as `name`; an unknown name raises a KeyError listing the known ones."""
  return REGISTRY.get(name)


def _replicated(init):
  return nn.with_logical_partitioning(init, (axes.NORM,))


def takes_epsilon(name: str) -> bool:
  """Whether the norm registered as `name` takes `epsilon` (`model.norm_epsilon`; the built-in ones do, a plug-in
  written before it existed may not)."""
  parameters = inspect.signature(get(name)).parameters
  return "epsilon" in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values())


@register("layernorm")
def layernorm(*, use_bias: bool = True, name: str | None = None, epsilon: float = EPSILON) -> nn.Module:
  """LayerNorm (Ba et al. 2016; the paper's): (x - mean) / sqrt(var + epsilon) * scale + bias."""
  return nn.LayerNorm(epsilon=epsilon, use_bias=use_bias, scale_init=_replicated(nn.initializers.ones),
                      bias_init=_replicated(nn.initializers.zeros), name=name)


@register("rmsnorm")
def rmsnorm(*, use_bias: bool = True, name: str | None = None, epsilon: float = EPSILON) -> nn.Module:
  """RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + epsilon) * scale; no centring, no bias."""
  del use_bias  # it has none.
  return nn.RMSNorm(epsilon=epsilon, scale_init=_replicated(nn.initializers.ones), name=name)


class RMSNormPlusOne(nn.Module):
  """x / sqrt(mean(x^2) + epsilon) * (1 + scale) over the last axis, in float32; `scale` `[F]` starts at 0."""
  epsilon: float = EPSILON

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """`[..., F]` -> float32 `[..., F]`."""
    scale = self.param("scale", _replicated(nn.initializers.zeros), (x.shape[-1],), jnp.float32)
    x = x.astype(jnp.float32)
    # 1 + scale in float32 whatever the stored dtype (an imported float16 or bfloat16 scale), as transformers does.
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.epsilon) * (
        1.0 + scale.astype(jnp.float32))


@register("rmsnorm_plus_one")
def rmsnorm_plus_one(*, use_bias: bool = True, name: str | None = None, epsilon: float = EPSILON) -> nn.Module:
  """RMSNorm whose weight is 1 + scale, scale starting at 0 (Gemma Team 2024, Gemma 2: its checkpoints hold scale)."""
  del use_bias  # it has none.
  return RMSNormPlusOne(epsilon=epsilon, name=name)
