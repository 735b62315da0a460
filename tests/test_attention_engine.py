"""The blockwise engine's interface (`blockwise.forward_blocks`, `backward_blocks`) called as a new kernel would:
the keys split into two ranges, each range's forward merged by the log-sum-exp, each range's backward at the merged
output and log-sum-exp, against dense softmax attention written out here (float32: outputs and gradients to 1e-5);
causal and padded rows, grouped-query heads, lengths that are not whole chunks. And the engine's memory under a
scan over layers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jformer.attention import blockwise

B, T, H, K, E = 2, 11, 4, 2, 8
BLOCKS = blockwise.Blocks(query_chunk=4, key_chunk=3, causal=False)


def dense_attention(q, k, v, visible):
  """softmax(q k^T / sqrt(E)) v over the keys where `visible` `[B, T, S]`: q `[B, T, H, E]`, k, v `[B, S, K, E]`."""
  k, v = (jnp.repeat(x, H // K, axis=2) for x in (k, v))
  s = jnp.einsum("bthe,bshe->bhts", q, k) / np.sqrt(E)
  s = jnp.where(visible[:, None], s, -1e30)  # a query that sees no key: finite (the mean of the values).
  return jnp.einsum("bhts,bshe->bthe", jax.nn.softmax(s, axis=-1), v)


def inputs(seed):
  q, k, v, d_out = (jax.random.normal(key, shape) for key, shape in zip(
      jax.random.split(jax.random.PRNGKey(seed), 4), [(B, T, H, E), (B, T, K, E), (B, T, K, E), (B, T, H, E)]))
  return q, k, v, d_out


def split_attention(q, k, v, d_out, blocks, visibility, split):
  """Output and gradients of attention over keys [0, split) and [split, S) run apart and merged by log-sum-exp."""
  ranges = [slice(0, split), slice(split, k.shape[1])]
  parts = [blockwise.forward_blocks(query=q, key=k[:, r], value=v[:, r], blocks=blocks,
                                    visibility=visibility._replace(kv_segment_ids=visibility.kv_segment_ids[:, r],
                                                                   kv_positions=visibility.kv_positions[:, r]))
           for r in ranges]
  (out_a, res_a), (out_b, res_b) = parts
  lse = jnp.logaddexp(res_a.lse, res_b.lse)
  out = (jnp.exp(res_a.lse - lse)[..., None] * out_a + jnp.exp(res_b.lse - lse)[..., None] * out_b)
  grads = [blockwise.backward_blocks(residuals=res._replace(out=out, lse=lse), d_out=d_out, blocks=blocks)
           for _, res in parts]
  return out, (grads[0].query + grads[1].query, jnp.concatenate([g.key for g in grads], axis=1),
               jnp.concatenate([g.value for g in grads], axis=1))


@pytest.mark.parametrize("causal", [False, True])
def test_two_key_ranges_merged_by_log_sum_exp_give_dense_attention_and_its_gradients(causal):
  q, k, v, d_out = inputs(0)
  ids = jnp.asarray(np.array([[1] * T, [1] * 6 + [2] * 3 + [0] * 2]), jnp.int32)  # row 1: two examples, padding.
  positions = jnp.asarray(np.array([np.arange(T), list(range(6)) + list(range(3)) + [0, 0]]), jnp.int32)
  visibility = blockwise.Visibility(ids, ids, positions, positions)
  visible = (ids[:, :, None] == ids[:, None, :]) & (ids[:, :, None] > 0)
  if causal:
    visible &= positions[:, :, None] >= positions[:, None, :]
  real = np.asarray(ids > 0)  # padded queries see no key: their output is left unspecified.
  blocks = blockwise.Blocks(query_chunk=4, key_chunk=3, causal=causal)

  want, want_vjp = jax.vjp(lambda q, k, v: dense_attention(q, k, v, visible), q, k, v)
  want_grads = want_vjp(d_out * real[..., None, None])
  got, got_grads = split_attention(q, k, v, d_out * real[..., None, None], blocks, visibility, split=5)
  np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=1e-5, rtol=1e-5)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


def test_the_backward_entry_point_gives_jax_grad_of_dense_attention():
  """One range, every key: `backward_blocks` at `forward_blocks`' residuals is the gradient of a loss of the output."""
  q, k, v, d_out = inputs(1)
  loss = lambda out: jnp.sum(jnp.sin(out) * d_out)
  want = jax.grad(lambda q, k, v: loss(dense_attention(q, k, v, jnp.ones((B, T, T), bool))), argnums=(0, 1, 2))(q, k, v)
  out, residuals = blockwise.forward_blocks(query=q, key=k, value=v, blocks=BLOCKS)
  grads = blockwise.backward_blocks(residuals=residuals, d_out=jax.grad(loss)(out), blocks=BLOCKS)
  assert residuals.lse.shape == (B, T, H) and residuals.lse.dtype == jnp.float32
  assert grads.captures is None and grads.bias is None and grads.params is None
  for g, w in zip((grads.query, grads.key, grads.value), want):
    np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)


def test_shapes_the_engine_does_not_take_are_refused():
  q, k, v, _ = inputs(2)
  with pytest.raises(ValueError, match=r"attention takes query \[B, T, H, E\], key \[B, S, K, E\] and value "
                                       r"\[B, S, K, Dv\] with H a multiple of K"):
    three_heads = jnp.ones((B, T, 3, E))  # 4 query heads do not share 3 key/value heads.
    blockwise.forward_blocks(query=q, key=three_heads, value=three_heads, blocks=BLOCKS)
  with pytest.raises(ValueError, match=r"got \(2, 11, 4, 8\), \(2, 11, 2, 8\) and \(2, 10, 2, 8\)"):
    blockwise.forward_blocks(query=q, key=k, value=v[:, :10], blocks=BLOCKS)


def test_the_engine_keeps_its_memory_under_a_scan_over_layers():
  """Under `lax.scan` (as `model.scan_layers` runs the layers) the gradient holds what it holds outside: the block
  masks are not hoisted out of the scan with every block's visibility stacked (the `[T, S]` mask: 4.2x when they
  were)."""
  x = jax.ShapeDtypeStruct((1, 1024, 4, 32), jnp.float32)
  attend = lambda x: blockwise.attention(x, x, x, causal=True, q_segment_ids=None, kv_segment_ids=None,
                                         q_positions=None, kv_positions=None, mask=None, bias=None,
                                         query_chunk_size=128, key_chunk_size=128)
  scanned = lambda x: lax.scan(lambda c, _: (attend(c), None), x, None, length=2)[0].sum()
  temp = lambda f: jax.jit(jax.grad(f)).lower(x).compile().memory_analysis().temp_size_in_bytes
  assert temp(scanned) <= 1.1 * temp(lambda x: attend(attend(x)).sum())
