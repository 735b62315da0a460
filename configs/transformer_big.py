"""The paper's big Transformer (Table 3 "big"): 213M parameters with a 37k vocab."""

import pathlib

from jformer import config as jconfig

HERE = pathlib.Path(__file__).parent


def get_config():
  config = jconfig.read(HERE / "transformer_base.py")
  model = config.model
  model.d_model = 1024  # Table 3 big: d_model.
  model.num_heads = 16  # Table 3 big: h.
  model.d_ff = 4096  # Table 3 big: d_ff.
  model.dropout_rate = 0.3  # Table 3 big: P_drop (EN-DE; the EN-FR model used 0.1).
  return config
