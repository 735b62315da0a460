"""Flax Linen modules: the encoder-decoder Transformer and the decoder-only language model on the same blocks, and
their frozen config (`TransformerConfig`). A run's model is built by its task (`jformer.tasks.build_model`).
`stack_layer_params` / `unstack_layer_params` convert parameters between the looped and the scanned layout
(`model.scan_layers`)."""

from __future__ import annotations

from jformer.models.config import TransformerConfig
from jformer.models.layout import stack_layer_params, unstack_layer_params
from jformer.models.lm import LanguageModel
from jformer.models.transformer import Decoder, DecoderLayer, Encoder, EncoderLayer, Transformer, TransformerLayer

__all__ = ["Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "LanguageModel", "Transformer", "TransformerConfig",
           "TransformerLayer", "stack_layer_params", "unstack_layer_params"]
