"""Matrix products in a narrow dtype (bfloat16) that accumulate in float32, in the forward and the backward pass.

XLA's CPU matmul with bfloat16 operands runs at about twice its float32 speed (AVX512_BF16 / AMX) only when it is
asked for a float32 result: bf16 x bf16 -> bf16 runs at the float32 speed or below. JAX's own derivative of such a
product multiplies the float32 cotangent by the bfloat16 operand, in float32. `matmul` keeps the three products of
a linear layer's train step, y = x W, dL/dx = dL/dy W^T and dL/dW = x^T dL/dy, all bf16 x bf16 -> float32; on GPU
and TPU this is what their matrix units do anyway.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def matmul(x_MxK: jax.Array, w_KxN: jax.Array, out_dtype) -> jax.Array:
  """`x @ w` of two operands of one dtype, accumulated in float32, returned as `out_dtype`: `[M, K] x [K, N] -> [M, N]`.

  The gradients are the same products with the cotangent cast to the operands' dtype, each accumulated in float32
  and returned in its operand's dtype.
  """
  if x_MxK.ndim != 2 or w_KxN.ndim != 2 or x_MxK.shape[1] != w_KxN.shape[0] or x_MxK.dtype != w_KxN.dtype:
    raise ValueError(f"matmul needs [M, K] x [K, N] of one dtype; got {x_MxK.shape} {x_MxK.dtype} x "
                     f"{w_KxN.shape} {w_KxN.dtype}")
  return lax.dot(x_MxK, w_KxN, preferred_element_type=jnp.float32).astype(out_dtype)


def _forward(x_MxK, w_KxN, out_dtype):
  return matmul(x_MxK, w_KxN, out_dtype), (x_MxK, w_KxN)


def _backward(out_dtype, residuals, g_MxN):
  x_MxK, w_KxN = residuals
  g_MxN = g_MxN.astype(x_MxK.dtype)
  dx_MxK = lax.dot_general(g_MxN, w_KxN, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
  dw_KxN = lax.dot_general(x_MxK, g_MxN, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
  return dx_MxK.astype(x_MxK.dtype), dw_KxN.astype(w_KxN.dtype)


matmul.defvjp(_forward, _backward)


def dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers, precision=None, preferred_element_type=None, *,
                out_dtype=None) -> jax.Array:
  """`lax.dot_general` without batch dimensions, computed by `matmul` (Flax's `Dense(dot_general=...)` hook).

  The contracted axes of `lhs` and `rhs` are flattened into one, their other axes into one each; the result is
  `[lhs kept axes..., rhs kept axes...]`, as `lax.dot_general`'s, in `out_dtype` (default: the operands' dtype).
  """
  del precision  # the operands' dtype decides the precision.
  (lhs_contract, rhs_contract), batch = dimension_numbers
  if any(batch):
    raise ValueError(f"jformer.ops.matmul.dot_general takes no batch dimensions; got {dimension_numbers}")
  lhs_contract, rhs_contract = ([axis % x.ndim for axis in axes] for x, axes in ((lhs, lhs_contract),
                                                                                 (rhs, rhs_contract)))
  lhs_kept = [axis for axis in range(lhs.ndim) if axis not in lhs_contract]
  rhs_kept = [axis for axis in range(rhs.ndim) if axis not in rhs_contract]
  contracted = math.prod(lhs.shape[axis] for axis in lhs_contract)
  x = jnp.transpose(lhs, lhs_kept + lhs_contract).reshape(-1, contracted)
  w = jnp.transpose(rhs, rhs_contract + rhs_kept).reshape(contracted, -1)
  out_dtype = out_dtype or preferred_element_type or lhs.dtype
  y = matmul(x, w, jnp.dtype(out_dtype))
  return y.reshape([lhs.shape[axis] for axis in lhs_kept] + [rhs.shape[axis] for axis in rhs_kept])


def add_bias(y: jax.Array, bias: jax.Array) -> jax.Array:
  """`y + bias`; for a narrow dtype (bfloat16) with the bias gradient as a product (`_add_bias_by_product`: faster
  and more accurate there), for float32 with XLA's own reduction (8x more accurate than its ones-vector product)."""
  return y + bias if y.dtype == jnp.float32 else _add_bias_by_product(y, bias)


@jax.custom_vjp
def _add_bias_by_product(y: jax.Array, bias: jax.Array) -> jax.Array:
  """`y + bias`, `[..., N] + [N]` (or `[..., *S] + [*S]`), whose bias gradient, the sum of the cotangent over the
  leading axes, is computed as a product with a vector of ones (accumulated in float32): XLA:CPU rewrites a large
  reduction of a bfloat16 array into a slow windowed reduction, many times the cost of the equivalent matmul.
  `y` and `bias` of one dtype."""
  if y.dtype != bias.dtype or y.shape[y.ndim - bias.ndim:] != bias.shape:
    raise ValueError(f"add_bias needs y [..., *S] and bias [*S] of one dtype; got {y.shape} {y.dtype} and "
                     f"{bias.shape} {bias.dtype}")
  return y + bias


def _add_bias_forward(y, bias):
  return _add_bias_by_product(y, bias), bias


def _add_bias_backward(bias, g):
  g_MxN = g.reshape(-1, bias.size)
  ones_M = jnp.ones((g_MxN.shape[0],), g.dtype)
  dbias = lax.dot_general(ones_M, g_MxN, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)
  return g, dbias.reshape(bias.shape).astype(bias.dtype)


_add_bias_by_product.defvjp(_add_bias_forward, _add_bias_backward)
