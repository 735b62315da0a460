"""Decoder-only language model on the same blocks (a Decoder without encoder-decoder attention)."""

from __future__ import annotations

import flax.linen as nn

from jformer import axes
from jformer.models.config import TransformerConfig
from jformer.models.layers import Embed
from jformer.models.transformer import Decoder, batch_keywords


class LanguageModel(nn.Module):
  """Next-token model: `tokens` `[B, T]` (0 = padding) -> logits `[B, T, V]` predicting `tokens` (shifted inside).

  Uses `num_decoder_layers` layers of masked self-attention + feed-forward. `mesh`: the `jformer.axes.Placement`
  the attention kernels run per device on (None: one device, or under pmap).
  """
  config: TransformerConfig
  mesh: axes.Placement | None = None
  is_encoder_decoder = False  # what callers ask instead of checking the class (`Transformer`: True).

  def call_arguments(self, batch: dict) -> tuple[tuple, dict]:
    """`(args, kwargs)` of the teacher-forced call `model(*args, **kwargs)` on a batch of `jformer.data` keys:
    'targets' (the text) and, for packed rows, 'targets_position' and 'targets_segmentation'; 'inputs' is unused."""
    return (batch["targets"],), batch_keywords(batch, {"targets_position": "positions",
                                                      "targets_segmentation": "segmentation"})

  def setup(self):
    cfg = self.config
    embed = Embed(cfg.vocab_size, cfg.d_model, cfg.compute_dtype, cfg.scale_embeddings, name="embedding")
    self.decoder = Decoder(cfg, embed, self.mesh)

  def __call__(self, tokens, *, positions=None, segmentation=None, deterministic=True, decode=False,
               return_hidden=False):
    """`return_hidden`: return (hidden `[B, T, D]`, output embedding `[V, D]`) instead of logits (see `Decoder`)."""
    return self.decoder(tokens, None, positions_BxT=positions, segmentation_BxT=segmentation,
                        deterministic=deterministic, decode=decode, return_hidden=return_hidden)
