"""`gated`: gated attention (Qiu et al. 2025, the gate at G1): softmax attention's output Y gated per head and
feature, Y' = Y * sigmoid(X W_g), before the output projection."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer import axes
from jformer.attention import auto, dot_product
from jformer.attention.capture import Capture
from jformer.attention.registry import register, softmax_weights
from jformer.registry import Param

# W_g `[d_model, H, Dv]`: a gate per query head and value feature (head-specific, elementwise: the paper's best),
# initialised as the query projection is (Xavier-uniform over d_model in, H * Dv out).
PARAMS = {"gate": Param(("d_model", "heads", "head_dim"),
                        jax.nn.initializers.xavier_uniform(in_axis=0, out_axis=(1, 2)),
                        axes=(axes.EMBED, axes.HEADS, axes.HEAD_DIM))}


def gate_logits(x_BxLxD: jax.Array, params) -> jax.Array:
  """X W_g, `[B, L, H, Dv]`: the gate's logits at each token from the layer input X (after the layer's norm, what
  the query projection reads), in X's dtype with float32 accumulation."""
  return jnp.einsum("bld,dhf->blhf", x_BxLxD, params["gate"].astype(x_BxLxD.dtype),
                    preferred_element_type=jnp.float32)


CAPTURES = {"gate": Capture(gate_logits, queries_only=True)}


def apply_gate(out_BxTxHxDv: jax.Array, captures) -> jax.Array:
  """Y' = Y * sigmoid(X W_g): each head's output `[B, T, H, Dv]` times its gate at the same query, computed in
  float32, returned in Y's dtype. Raises ValueError unless the captured logits are shaped like Y."""
  logits = captures["q"]["gate"]
  if logits.shape != out_BxTxHxDv.shape:
    raise ValueError(f"attention variant 'gated': the gate's logits (captures['q']['gate']) must be shaped like the "
                     f"output [B, T, H, Dv] = {list(out_BxTxHxDv.shape)}, got {list(logits.shape)}")
  return (out_BxTxHxDv.astype(jnp.float32) * jax.nn.sigmoid(logits)).astype(out_BxTxHxDv.dtype)


def gated_reference(query, key, value, *, params, captures, **signature):
  """The explicit formula: softmax(Q K^T / sqrt(d) + bias) V over the visible keys (`dot_product`'s), gated."""
  del params  # read by the capture only.
  return apply_gate(dot_product.VARIANT.reference(query, key, value, **signature), captures)


@register("gated", supports=auto.VARIANT.supports, params=PARAMS, captures=CAPTURES, weights=softmax_weights,
          reference=gated_reference)
def gated(query, key, value, *, params, captures, mesh=None, **signature):
  """Gated attention (Qiu et al. 2025, G1): Y' = Y * sigmoid(X W_g), Y = softmax(Q K^T / sqrt(d_k) + bias) V per head.

  The gate is head-specific and elementwise (one logit per query head and value feature: W_g `[d_model, H, Dv]`,
  the `gate` parameter), computed from the layer input X at each query (`captures`, read at the queries only: the
  decode cache keeps nothing of it) and applied to each head's output before the output projection W^O: position
  G1 of the paper, its best (a non-linearity between W_V and W^O, and sparse, query-dependent gates that remove the
  attention sink). The attention underneath is `auto`'s (the library kernels, chunked or dot_product), with every
  feature it supports; its weights (attention maps) are softmax's, ungated.

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0), the arguments of the variant
    signature (`jformer/attention/__init__.py`); params {"gate": [d_model, H, Dv]} (read by the capture);
    captures {"q": {"gate": X W_g `[B, T, H, Dv]`}, "kv": {}}; `mesh`: as `auto`'s.

  Returns:
    `[B, T, H, Dv]`.
  """
  del params  # read by the capture only.
  return apply_gate(auto.VARIANT.fn(query, key, value, **signature, mesh=mesh), captures)
