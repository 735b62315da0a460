"""The feed-forward nonlinearities (`model.activation`), by name: a registry, so a plug-in adds its own.

An activation registers an elementwise function `fn(x) -> y`. A plain one gives FFN(x) = fn(x W_1 + b_1) W_2 + b_2
(paper eq. 2 with ReLU); a gated one (`gated=True`, GLU variants, Shazeer 2020) gives
FFN(x) = (fn(x W_0 + b_0) * (x W_1 + b_1)) W_2 + b_2, with two input projections of width d_ff
(`jformer.models.layers.FeedForward`). So a gated block of the same `model.d_ff` has 3/2 the feed-forward
parameters; d_ff = 2/3 of the plain width (e.g. round(2/3 * 4 * d_model)) keeps the count, as Shazeer 2020 does.

    @activations.register("squared_relu")
    def squared_relu(x):
      \"\"\"relu(x)^2 (So et al. 2021).\"\"\"
      return jnp.square(jax.nn.relu(x))
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import flax.linen as nn
import jax

from jformer.registry import Registry, caller, first_line


@dataclasses.dataclass(frozen=True)
class Activation:
  """A registered feed-forward nonlinearity.

  Attributes:
    name: the config string (`model.activation`).
    fn: the elementwise function.
    gated: whether it gates a second projection: fn(x W_0) * (x W_1).
    doc: one line for `jformer list activation`.
  """
  name: str
  fn: Callable[[jax.Array], jax.Array]
  gated: bool = False
  doc: str = ""


def _declare(name: str, fn: Callable, *, gated: bool = False, doc: str = "") -> Activation:
  if not callable(fn):
    raise ValueError(f"activation '{name}' must be a function of one array, got {fn!r}")
  return Activation(name, fn, bool(gated), doc or first_line(fn.__doc__))


REGISTRY: Registry[Activation] = Registry(
    "activation", declare=_declare, details=lambda entry: "gated: fn(x W_0) * (x W_1)" if entry.gated else "")


def register(name: str, *, gated: bool = False, doc: str = ""):
  """Decorator: `@register("name", gated=False)` above an elementwise function (module doc)."""
  return REGISTRY.register(name, origin=caller(), gated=gated, doc=doc)


def get(name: str) -> Activation:
  """The activation registered as `name`; an unknown name raises a KeyError listing the known ones."""
  return REGISTRY.get(name)


@register("relu")
def relu(x):
  """max(0, x) (paper eq. 2)."""
  return nn.relu(x)


@register("gelu")
def gelu(x):
  """GELU, tanh approximation (Hendrycks & Gimpel 2016; flax's `nn.gelu`)."""
  return nn.gelu(x)


@register("silu")
def silu(x):
  """SiLU, also called Swish: x sigmoid(x) (Ramachandran et al. 2017; Marian's "swish"), not gated."""
  return nn.silu(x)


@register("swiglu", gated=True)
def swiglu(x):
  """SwiGLU (Shazeer 2020): Swish(x W_0) * (x W_1), Swish(x) = x sigmoid(x)."""
  return nn.silu(x)


@register("geglu", gated=True)
def geglu(x):
  """GEGLU (Shazeer 2020): GELU(x W_0) * (x W_1), GELU's tanh approximation."""
  return nn.gelu(x)
