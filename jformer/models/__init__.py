"""Flax Linen modules; `build(config)` turns a config into the module."""

from __future__ import annotations

from jformer.models.config import TransformerConfig
from jformer.models.lm import LanguageModel
from jformer.models.transformer import Decoder, DecoderLayer, Encoder, EncoderLayer, Transformer, TransformerLayer

ARCHITECTURES = {"transformer": Transformer, "lm": LanguageModel}


def build(config):
  """The module that `config.model` describes (`config.model.architecture`: 'transformer' or 'lm')."""
  model_config = dict(config.model)
  architecture = model_config.pop("architecture", "transformer")
  if architecture not in ARCHITECTURES:
    raise ValueError(f"model.architecture='{architecture}' is unknown; known: {sorted(ARCHITECTURES)}")
  return ARCHITECTURES[architecture](TransformerConfig.from_config(model_config))


__all__ = ["ARCHITECTURES", "Decoder", "DecoderLayer", "Encoder", "EncoderLayer", "LanguageModel",
           "Transformer", "TransformerConfig", "TransformerLayer", "build"]
