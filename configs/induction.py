"""Induction heads (Olsson et al. 2022; the synthetic task of H3 and Mamba): random tokens with a trigger that
appears twice, the answer being the token that followed its first occurrence. A 2-layer decoder of width 64 with
dot-product attention, 64 tokens, a 16-token vocabulary; loss and accuracy on the answer only.

    jformer train --config=configs/induction.py --workdir=runs/induction [--config.model.attention=linear]

The rule is in jformer/data/synthetic/induction.py. Chance is 1/15 (the answer is one of 15 content tokens).
"""

import pathlib

from jformer import config as jconfig
from jformer.config.synthetic import use_synthetic_task

HERE = pathlib.Path(__file__).parent

VOCAB = 16  # Mamba's: the trigger and 15 content tokens.
SEQ_LEN = 64


def get_config():
  config = jconfig.read(HERE / "mqar.py")  # the same 2-layer decoder and recipe, another dataset.
  use_synthetic_task(config, "induction", vocab_size=VOCAB, seq_len=SEQ_LEN)
  return config
