"""`auto` (the default): picks the attention kernel per backend, shape and dtype, then calls it.

- attention dropout requested: `dot_product` (the one variant that drops attention weights);
- GPU with bfloat16/float16 inputs: `xla` (`jax.nn.dot_product_attention`; untested on GPU hardware);
- query length x key length >= `BLOCKWISE_MIN_PAIRS` (512 x 512): `chunked`, memory linear in the length (on a
  2-core CPU it also runs fwd+bwd 1.0x the dense time at 512, 0.65x at 1024, 0.47x at 2048:
  `benchmarks/attention.py`);
- otherwise (short sequences, decode steps): `dot_product`, the dense reference, fastest there.
The choice is made while tracing, from static shapes, so it costs nothing at run time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.attention.registry import get, register

BLOCKWISE_MIN_PAIRS = 512 * 512
_HALF_PRECISION = (jnp.bfloat16, jnp.float16)


def choose(query: jax.Array, key: jax.Array, *, dropout_rate: float = 0.0, backend: str | None = None) -> str:
  """The variant `auto` runs for query `[B, T, H, D]` and key `[B, S, K, D]` on `backend` (default: JAX's)."""
  backend = backend or jax.default_backend()
  if dropout_rate > 0.0:
    return "dot_product"
  if backend == "gpu" and query.dtype in _HALF_PRECISION:
    return "xla"
  if query.shape[1] * key.shape[1] >= BLOCKWISE_MIN_PAIRS:
    return "chunked"
  return "dot_product"


@register("auto", supports={"causal", "segment_ids", "positions", "mask", "bias", "dropout", "decode", "gqa"})
def auto(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
         kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None):
  """Per backend and shape: `xla` (GPU, half precision), `chunked` (long), `dot_product` (short)."""
  name = choose(query, key, dropout_rate=dropout_rate)
  return get(name).fn(query, key, value, causal=causal, q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids,
                      q_positions=q_positions, kv_positions=kv_positions, mask=mask, bias=bias,
                      dropout_rate=dropout_rate, dropout_rng=dropout_rng)
