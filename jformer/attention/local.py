"""`local`: sliding-window attention, the window handed to the kernels as data (`window=`), so they skip what it
leaves out."""

from __future__ import annotations

from jformer.attention import auto, decode_state
from jformer.attention.registry import register, softmax_weights

# The default window: keys less than 256 positions away, so a sequence of at most 256 tokens is attended in full
# and only longer ones are restricted; set `model.attention_options.window_size` for the length you train at.
WINDOW_SIZE = 256


def window_of(window_size: int) -> tuple[int, int]:
  """The `window=(left, right)` argument of the variant signature that `window_size` means: (w - 1, w - 1)."""
  return (window_size - 1, window_size - 1)


def local_weights(query, key, *, window_size: int = WINDOW_SIZE, **masking):
  """Softmax attention weights `[B, H, T, S]` over the visible keys within the window: the explicit formula."""
  return softmax_weights(query, key, window=window_of(window_size), **masking)


@register("local", supports={"causal", "segment_ids", "positions", "mask", "bias", "dropout", "decode", "gqa",
                             "softcap"},
          weights=local_weights, example_options=dict(window_size=3), decode_state=decode_state.window("window_size"),
          splits_sequence=True)
def local(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
          kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, logits_softcap=0.0, mesh=None,
          window_size: int = WINDOW_SIZE):
  """Sliding-window attention: each query sees the keys less than `window_size` positions away (causal: before).

  softmax(Q K^T / sqrt(d_k)) V (paper eq. 1) with the visibility of the signature AND
  |position(i) - position(j)| < window_size (causal: 0 <= position(i) - position(j) < window_size), i.e. the
  reference with `ops.masks.window_mask` at (w - 1, w - 1) added (Beltagy et al. 2020; Child et al. 2019;
  Mistral and Gemma 2 interleave it with global layers).

  Runs as `auto` with `window=(w - 1, w - 1)`: on TPU splash's `LocalMask`, on NVIDIA GPUs cuDNN's
  `local_window_size` (causal), which skip the blocks outside the window; elsewhere, and for what those cannot
  express (positions of decode steps, a bias), `chunked`, which skips them too (work and memory O(T * window)),
  or dense `dot_product` for short sequences. Decoding keeps the last `window_size` keys and values only
  (`decode_state.window`).

  Args:
    query `[B, T, H, D]`, key `[B, S, K, D]`, value `[B, S, K, Dv]` (H % K == 0), the masking arguments of the
    variant signature (`jformer/attention/__init__.py`); `mesh`: as `auto`'s.
    window_size: the window (option), a positive int; default WINDOW_SIZE = 256 (`example_options` uses 3, so
      that the tests' short sequences exercise it).

  Returns:
    `[B, T, H, Dv]`.
  """
  return auto.VARIANT.fn(query, key, value, causal=causal, q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids,
                         q_positions=q_positions, kv_positions=kv_positions, mask=mask, bias=bias,
                         dropout_rate=dropout_rate, dropout_rng=dropout_rng, logits_softcap=logits_softcap,
                         window=window_of(window_size), mesh=mesh)
