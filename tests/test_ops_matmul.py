"""jformer.ops.matmul: bf16 x bf16 -> float32 products in the forward and the backward pass, against float64."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from jformer.ops import matmul


def operands(dtype, m=48, k=40, n=24, seed=0):
  kx, kw, kg = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(kx, (m, k)).astype(dtype), jax.random.normal(kw, (k, n)).astype(dtype),
          jax.random.normal(kg, (m, n)))


def f64(x):
  return np.asarray(x.astype(jnp.float32), np.float64)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_forward_and_gradients_are_the_products_accumulated_in_float32(dtype):
  """y = x w, dx = g w^T, dw = x^T g, with g rounded to the operands' dtype; accumulated in float32 (the error
  is that of rounding each float32 result to `dtype` once, not of a bf16 accumulation over K = 40 terms)."""
  x, w, g = operands(dtype)
  y, vjp = jax.vjp(lambda x, w: matmul.matmul(x, w, jnp.float32), x, w)
  dx, dw = vjp(g)
  g_rounded = f64(g.astype(dtype))
  assert y.dtype == jnp.float32 and dx.dtype == dw.dtype == dtype
  tolerance = 1e-5 if dtype == jnp.float32 else 2 ** -8  # relative: float32, or bf16's 8-bit mantissa once.
  for got, want in ((y, f64(x) @ f64(w)), (dx, g_rounded @ f64(w).T), (dw, f64(x).T @ g_rounded)):
    np.testing.assert_allclose(f64(got), want, rtol=tolerance, atol=tolerance * np.abs(want).max())


def test_backward_multiplies_bfloat16_operands_only():
  """The point of the module: every product of the train step reads bf16 x bf16 (JAX's own derivative of a
  float32-accumulated bf16 product would multiply a float32 cotangent by a bf16 operand, at float32 speed)."""
  x, w, _ = operands(jnp.bfloat16)
  loss = lambda x, w: jnp.sum(matmul.matmul(x, w, jnp.float32) ** 2)
  jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(x, w)
  dots = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
  dots += [e for eqn in jaxpr.eqns for sub in jax.extend.core.jaxprs_in_params(eqn.params) for e in sub.eqns
           if e.primitive.name == "dot_general"]
  assert len(dots) >= 3
  for eqn in dots:
    assert [v.aval.dtype for v in eqn.invars] == [jnp.bfloat16, jnp.bfloat16]
    assert eqn.params["preferred_element_type"] == jnp.float32


@pytest.mark.parametrize("lhs_shape, rhs_shape, contract", [
    ((2, 5, 8), (8, 6), ((2,), (0,))),  # nn.Dense
    ((2, 5, 8), (8, 3, 4), ((2,), (0,))),  # DenseGeneral to heads: [B, L, D] x [D, H, K]
    ((2, 5, 3, 4), (3, 4, 8), ((2, 3), (0, 1))),  # DenseGeneral from heads: [B, T, H, K] x [H, K, D]
    ((5, 8, 2), (6, 8), ((1,), (1,))),  # contracted axes in the middle and at the end
])
def test_dot_general_equals_lax_dot_general(lhs_shape, rhs_shape, contract):
  lhs = jax.random.normal(jax.random.PRNGKey(1), lhs_shape)
  rhs = jax.random.normal(jax.random.PRNGKey(2), rhs_shape)
  dims = (contract, ((), ()))
  want = jax.lax.dot_general(lhs, rhs, dims)
  got = matmul.dot_general(lhs, rhs, dims)
  assert got.shape == want.shape and got.dtype == jnp.float32
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  grads = lambda f: jax.grad(lambda a, b: jnp.sum(jnp.sin(f(a, b, dims))), argnums=(0, 1))(lhs, rhs)
  for got, want in zip(grads(matmul.dot_general), grads(jax.lax.dot_general)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bad_operands_are_refused_naming_the_shapes():
  with pytest.raises(ValueError, match=r"no batch dimensions"):
    matmul.dot_general(jnp.ones((2, 3, 4)), jnp.ones((2, 4, 5)), (((2,), (1,)), ((0,), (0,))))
  with pytest.raises(ValueError, match=r"\(3, 4\) float32 x \(4, 5\) bfloat16"):
    matmul.matmul(jnp.ones((3, 4)), jnp.ones((4, 5), jnp.bfloat16), jnp.float32)
