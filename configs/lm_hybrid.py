"""The LM demo as a linear / softmax hybrid: linear-attention layers with one softmax layer in every three.

    jformer train --config=configs/lm_hybrid.py --workdir=runs/lm_hybrid
    echo "The" | jformer generate --workdir=runs/lm_hybrid

`configs/lm_demo.py` (d_model 256, rows of 256 tokens from the bundled English text) with the 6 decoder layers of
`configs/lm_local_global.py` in the pattern linear, linear, softmax: kernelized linear attention (Katharopoulos et
al. 2020; `jformer list attention`) in two layers of three, exact softmax attention in the third, the hybrid that
Based (Arora et al. 2024) and Jamba-style stacks use so that a few softmax layers do the precise recall linear
attention cannot. Rotary positions of base 10,000 in every layer.
"""

import pathlib

from jformer import config as jconfig

HERE = pathlib.Path(__file__).parent


def get_config():
  config = jconfig.read(HERE / "lm_local_global.py")  # its 6 layers, with these kinds instead.
  model = config.model
  model.layer_kinds = {"linear": {"attention": "linear"}, "softmax": {"attention": "auto"}}
  model.layer_pattern = ("linear", "linear", "softmax")
  return config
