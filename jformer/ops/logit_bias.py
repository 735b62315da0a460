"""A bias on the output logits, z = h E^T + b, for a loss that projects the hidden states itself
(`jformer.ops.linear_cross_entropy`): the bias becomes one more feature, (h, 1) . (E, b)^T = h E^T + b, so the fused
loss, and its gradient (b's is the table's new column's), need nothing of their own."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def append_bias(hidden_BxTxD: jax.Array, table_VxD: jax.Array, bias_V: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(hidden `[B, T, D + 1]`: a constant 1 feature appended, table `[V, D + 1]`: `bias_V` appended as a column), whose
  product is hidden table^T + bias."""
  ones_BxTx1 = jnp.ones(hidden_BxTxD.shape[:-1] + (1,), hidden_BxTxD.dtype)
  return (jnp.concatenate([hidden_BxTxD, ones_BxTx1], -1),
          jnp.concatenate([table_VxD, bias_V.astype(table_VxD.dtype)[:, None]], -1))
