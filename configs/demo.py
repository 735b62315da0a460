"""A small Transformer that trains in minutes on 2 CPU cores on the bundled English-German corpus."""

from jformer.config import base_config


def get_config():
  config = base_config()
  model = config.model
  model.vocab_size = 8000  # SentencePiece vocabulary trained on the bundled corpus.
  model.d_model = 256
  model.num_heads = 4
  model.d_ff = 1024
  model.num_encoder_layers = 3
  model.num_decoder_layers = 3
  model.dropout_rate = 0.1
  model.max_length = 128
  return config
