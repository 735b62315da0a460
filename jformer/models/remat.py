"""Rematerialized layers: keep a layer's inputs, recompute its activations in the backward pass.

`jax.checkpoint` marks the recomputation with an optimization barrier so that XLA does not merge it with the
forward pass; XLA:CPU drops those barriers before common-subexpression elimination, which then merges the two and
keeps every activation (no memory saved at all). Here the recomputation starts from inputs that depend on the
incoming cotangent (`x + 0 * g[0]`), which no compiler can share with the forward pass, on any backend: the
step's temporary memory falls (`benchmarks/memory.py`, docs/results/memory.md), for one more forward pass of each
layer (1/3 more FLOPs); tests/test_models_remat.py checks that it keeps less.

`model.remat` names when: 'none', 'full', 'auto' (full from `AUTO_MIN_LENGTH` tokens), or a policy of
`jax.checkpoint_policies` ('dots_saveable': keep the matmul outputs, recompute the rest; 'nothing_saveable': keep
nothing, as 'full'; 'offload_dots': JAX's `offload_dot_with_no_batch_dims`, which marks the outputs of the
matmuls with weights (no batch dimensions: the projections, not the attention scores) for pinned host memory, to be
copied back for the backward pass, as MaxText's offloading policies do) applied to each layer with `nn.remat`, in
the loop and in the scanned layout alike. Every policy computes the gradients of 'none'
(tests/test_models_remat.py); whether XLA moves the offloaded values, and so saves a GPU's or TPU's memory, is the
backend's choice and is not measured here (on CPU both memories are host RAM). In the
scanned layout the recomputation runs inside the scan's backward loop, where no compiler can merge it with the
forward pass: the policies save memory on every backend. In the loop, XLA:CPU merges `nn.remat`'s recomputation as
above, so on CPU only 'full' and 'auto' save memory there (tests/test_models_remat.py measures both).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

# Sequences at least this long are rematerialized when `model.remat = "auto"`.
AUTO_MIN_LENGTH = 1024


# The named policies of `model.remat` (jax.checkpoint_policies): which intermediate values a layer keeps.
POLICIES = {"dots_saveable": jax.checkpoint_policies.dots_saveable,
            "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
            "offload_dots": jax.checkpoint_policies.offload_dot_with_no_batch_dims("device", "pinned_host")}
MODES = ("auto", "none", "full", *POLICIES)


def wanted(remat: str, length: int) -> bool:
  """Whether `model.remat` (one of `MODES`) asks for rematerialization at this sequence length."""
  return remat == "full" or remat in POLICIES or (remat == "auto" and length >= AUTO_MIN_LENGTH)


def policy(remat: str):
  """The `jax.checkpoint` policy of `model.remat` for `nn.remat`: a named one, or None (save nothing) for
  'full' and 'auto'."""
  return POLICIES.get(remat)


def rematerialized(fn: Callable, params, x: jax.Array, context, constants):
  """`fn(params, x, context, constants)` whose backward pass recomputes it from (params, x, context).

  Args:
    fn: a pure function; differentiable in `params`, `x` and `context` (a float array or None, e.g. the
      encoder output a decoder layer attends to); `constants` (a tuple of int arrays, keys or None) get no
      gradient.
    x: the layer input `[B, L, D]`.

  Returns:
    `fn(...)`, with only its inputs kept for the backward pass.
  """

  @jax.custom_vjp
  def run(params, x, context):
    return fn(params, x, context, constants)

  def forward(params, x, context):
    return fn(params, x, context, constants), (params, x, context)

  def backward(inputs, grad):
    params, x, context = inputs
    # A dependence on the cotangent: the recomputation cannot be merged with (or hoisted into) the forward pass.
    x = x + (jnp.zeros((), grad.dtype) * grad.reshape(-1)[0]).astype(x.dtype)
    _, vjp = jax.vjp(lambda p, h, c: fn(p, h, c, constants), params, x, context)
    return vjp(grad)

  run.defvjp(forward, backward)
  return run(params, x, context)
