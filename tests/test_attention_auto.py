"""`auto` picks the kernel per backend, shape and dtype (its numbers are checked with every variant in
test_attention_variants.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import attention
from jformer.attention import auto


def shaped(length, kv_length=None, dtype=jnp.float32):
  return (jax.ShapeDtypeStruct((1, length, 2, 8), dtype), jax.ShapeDtypeStruct((1, kv_length or length, 2, 8), dtype))


@pytest.mark.parametrize("q_len, kv_len, backend, dtype, dropout, want", [
    (64, 64, "cpu", jnp.float32, 0.0, "dot_product"),
    (511, 512, "cpu", jnp.float32, 0.0, "dot_product"),
    (512, 512, "cpu", jnp.float32, 0.0, "chunked"),
    (1, 4096, "cpu", jnp.float32, 0.0, "dot_product"),  # a decode step against a long cache.
    (4096, 4096, "cpu", jnp.float32, 0.1, "dot_product"),  # only the reference drops attention weights.
    (4096, 4096, "gpu", jnp.bfloat16, 0.0, "xla"),
    (4096, 4096, "gpu", jnp.float32, 0.0, "chunked"),
    (4096, 4096, "tpu", jnp.bfloat16, 0.0, "chunked"),
])
def test_choice(q_len, kv_len, backend, dtype, dropout, want):
  query, key = shaped(q_len, kv_len, dtype)
  assert auto.choose(query, key, dropout_rate=dropout, backend=backend) == want


def test_long_sequence_runs_blockwise_in_linear_memory():
  length = 1024
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, length, 2, 16)) for i in range(3))
  grad = lambda name: jax.jit(jax.grad(lambda q: attention.get(name).fn(q, k, v, causal=True).sum()))
  temp = {name: grad(name).lower(q).compile().memory_analysis().temp_size_in_bytes
          for name in ("auto", "chunked", "dot_product")}
  assert temp["auto"] == temp["chunked"] < temp["dot_product"] / 4
  np.testing.assert_allclose(grad("auto")(q), grad("dot_product")(q), atol=1e-5)
