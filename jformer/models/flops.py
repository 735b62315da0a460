"""Matmul FLOPs of a Transformer train step: what benchmarks divide by a step's time (model FLOP/s, MFU) and what
`jformer.config.adaptive` divides by the machine's measured matmul rate to estimate the steps a time budget buys.

Counted: the matrix products only (2 FLOPs per multiply-add), full T x T attention, the backward pass as twice the
forward (Kaplan et al. 2020's 6N per token, with attention's score and value products added). Not counted: norms,
softmax, dropout, the optimizer; what a step spends on them is the gap between these FLOPs and its time.
"""

from __future__ import annotations

from jformer.models.config import TransformerConfig

GATED = ("swiglu", "geglu")  # Feed-forward activations with a gate: three d_model x d_ff matrices instead of two.


def forward_flops(*, rows: int, source_length: int, target_length: int, d_model: int, d_ff: int, vocab: int,
                  encoder_layers: int, decoder_layers: int, cross_attention: bool = True, gated: bool = False,
                  kv_fraction: float = 1.0, attention_width: int | None = None) -> int:
  """Matmul FLOPs of one teacher-forced forward pass over `rows` (source, target) pairs.

  With b rows, source length s, target length t, width d, feed-forward width f, vocabulary V, k = kv_fraction
  (key/value heads over query heads; 1 for the paper's attention) and a = attention_width (heads x head_dim; d
  unless `model.head_dim` says otherwise):
    self-attention over n positions:   4bnda (Q, O) + 4bnda k (K, V) + 4bn^2 a (scores, values)
    feed-forward:                      4bndf (6bndf gated)
    cross-attention:                   4btda (Q, O) + 4bsda k (K, V) + 4btsa
    output projection:                 2btdV
  For the paper's model that is Le*[8bsd^2 + 4bs^2d + 4bsdf] + Ld*[8btd^2 + 4bt^2d + 4btd^2 + 4bsd^2 + 4btsd +
  4btdf] + 2btdV. A decoder-only model has no encoder layers and no cross-attention (`cross_attention=False`).
  """
  b, d, f, a = rows, d_model, d_ff, attention_width or d_model
  ffn_matrices = 3 if gated else 2

  def self_attention_layer(n):
    return (4 * b * n * d * a + int(4 * b * n * d * a * kv_fraction) + 4 * b * n * n * a
            + 2 * ffn_matrices * b * n * d * f)

  s, t = source_length, target_length
  cross = 4 * b * t * d * a + int(4 * b * s * d * a * kv_fraction) + 4 * b * t * s * a if cross_attention else 0
  return (encoder_layers * self_attention_layer(s) + decoder_layers * (self_attention_layer(t) + cross)
          + 2 * b * t * d * vocab)


def train_flops(config: TransformerConfig, *, rows: int, length: int) -> int:
  """Matmul FLOPs of one train step of the model `config` on `rows` rows of `length` tokens (source and target
  rows of that length for the encoder-decoder): 3 x `forward_flops`. Architectures other than 'transformer' are
  decoder-only (their encoder layer count is not read)."""
  decoder_only = config.architecture != "transformer"
  kv_heads = config.num_kv_heads or config.num_heads
  return 3 * forward_flops(rows=rows, source_length=0 if decoder_only else length, target_length=length,
                           d_model=config.d_model, d_ff=config.d_ff, vocab=config.vocab_size,
                           encoder_layers=0 if decoder_only else config.num_encoder_layers,
                           decoder_layers=config.num_decoder_layers,
                           cross_attention=not decoder_only, gated=config.activation in GATED,
                           kv_fraction=kv_heads / config.num_heads,
                           attention_width=config.num_heads * config.head_width)
