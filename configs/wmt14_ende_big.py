"""The paper's big run on WMT 2014 English->German: 300k steps, P_drop 0.3, average of the last 20 checkpoints.

Batches as the base run (`wmt14_ende_base.py`, Sec. 5.1): data.batch_tokens=25,000 source and 25,000 target tokens
per step at most, unpacked rows bucketed by length.
"""

import pathlib

from jformer import config as jconfig

HERE = pathlib.Path(__file__).parent


def get_config():
  config = jconfig.read(HERE / "wmt14_ende_base.py")
  big = jconfig.read(HERE / "transformer_big.py")
  config.model = big.model  # Table 3 big: d_model 1024, 16 heads, d_ff 4096, dropout 0.3.
  config.train.steps = 300_000  # Paper big: 300k steps (3.5 days on 8 P100s).
  config.train.checkpoint_every = 1000
  config.train.keep_checkpoints = 20
  config.train.average_checkpoints = 20  # Paper: average the last 20 checkpoints (big).
  return config
