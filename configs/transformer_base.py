"""The paper's base Transformer (Vaswani et al. 2017, Table 3 "base"): 65M parameters with a 37k vocab."""

from jformer.config import base_config


def get_config():
  config = base_config()
  model = config.model
  model.vocab_size = 37000  # Shared source-target BPE vocabulary of the WMT14 EN-DE runs (Sec. 5.1).
  model.d_model = 512  # Table 3: d_model.
  model.num_heads = 8  # Table 3: h.
  model.d_ff = 2048  # Table 3: d_ff.
  model.num_encoder_layers = 6  # Table 3: N.
  model.num_decoder_layers = 6  # Table 3: N.
  model.dropout_rate = 0.1  # Table 3: P_drop.
  model.max_length = 256  # Longest tokenised sentence the position table covers.
  return config
