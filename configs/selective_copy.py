"""Selective copying (Gu & Dao 2023, Mamba Section 4.1.1): 16 data tokens scattered among blanks in a context,
then reproduced in order after a delimiter. A 2-layer decoder of width 64 with dot-product attention, 256 tokens
(16 sequences a step: 4,096 tokens, as configs/mqar.py), a 16-token vocabulary; loss and accuracy on the 16
answers only.

    jformer train --config=configs/selective_copy.py --workdir=runs/selective_copy [--config.model.attention=linear]

The rule is in jformer/data/synthetic/selective_copy.py. Chance is 1/14 per answer (14 data tokens).
"""

import pathlib

from jformer import config as jconfig
from jformer.config.synthetic import use_synthetic_task

HERE = pathlib.Path(__file__).parent
VOCAB = 16  # Mamba's: blank, delimiter and 14 data tokens.
SEQ_LEN = 256
NUM_TOKENS = 16


def get_config():
  config = jconfig.read(HERE / "mqar.py")  # the same 2-layer decoder and recipe, another dataset.
  use_synthetic_task(config, "selective_copy", vocab_size=VOCAB, seq_len=SEQ_LEN, num_tokens=NUM_TOKENS)
  config.data.batch_size = 16
  return config
