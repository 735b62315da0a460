"""The LM demo with Gemma 3's layer pattern: five local (sliding-window) layers, then one global layer, repeated.

    jformer train --config=configs/lm_local_global.py --workdir=runs/lm_local_global
    echo "The" | jformer generate --workdir=runs/lm_local_global

`configs/lm_demo.py` (d_model 256, rows of 256 tokens from the bundled English text, test bits per byte at 256, 512
and 1024) with 6 decoder layers in the pattern local x 5, global (Gemma 3, Team Gemma 2025): the local layers attend
to a window of the last 128 tokens (half the training context, so that they differ from global ones in training
too) with rotary positions of base 10,000, the global layer to everything before it with base 1,000,000 (Gemma 3's
two bases). The window limits what each local layer sees; the global layer and the stack's depth carry the rest.
"""

import pathlib

from jformer import config as jconfig

HERE = pathlib.Path(__file__).parent


def get_config():
  config = jconfig.read(HERE / "lm_demo.py")
  model = config.model
  model.num_decoder_layers = 6  # rotary positions, as every layer of the LM demo's block.
  model.layer_kinds = {
      "local": {"attention": "local", "attention_options": {"window_size": 128},
                "positional_options": {"base": 10_000.0}},
      "global": {"attention": "auto", "positional_options": {"base": 1_000_000.0}},
  }
  model.layer_pattern = ("local",) * 5 + ("global",)
  return config
