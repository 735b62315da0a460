"""Creates the parameters a plug-in (attention variant, positional encoding) declares, inside a Flax module."""

from __future__ import annotations

from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from jformer.registry import Param


def create(module: nn.Module, specs: Mapping[str, Param], dims: Mapping[str, int]) -> dict[str, jax.Array]:
  """`module.param(...)` for each declared parameter: float32, shape resolved from `dims` (model dimensions and
  the plug-in's options), initialised by its `init`, its dimensions carrying their logical axis names so FSDP and
  tensor parallelism shard it like the rest of the model."""
  return {name: module.param(name, nn.with_logical_partitioning(spec.init, spec.logical_axes()), spec.resolve(dims),
                             jnp.float32)
          for name, spec in sorted(specs.items())}


class DeclaredParams(nn.Module):
  """A scope holding a plug-in's declared parameters (so their names never clash with the host module's);
  calling it returns them as {name: array}."""
  specs: Mapping[str, Param]
  dims: Mapping[str, int]

  @nn.compact
  def __call__(self) -> dict[str, jax.Array]:
    return create(self, self.specs, self.dims)
