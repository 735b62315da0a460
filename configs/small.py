"""The demo's model and data with a fixed recipe: 600 steps, float32, no dropout (configs/demo.py trains it for
15 minutes). The base of the tests (shrunk further) and of the sweeps, whose points must not depend on the machine.

    jformer train --config=configs/small.py --workdir=runs/small

Shrinks the paper's base model (Table 3) to fit a laptop: d_model 256, 3+3 layers, an 8k shared
SentencePiece vocabulary, packed rows of 64 tokens; a short warm-up and a higher peak learning rate
(same schedule, eq. 3) because the run is short; no dropout: 600 steps make about one pass over the 111k pairs.
"""

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
  model.dropout_rate = 0.0  # Under-trained regime: dropout only slows learning (and costs ~20% of step time).
  model.max_length = 128

  config.data.max_length = 64  # Packed rows of 64 tokens; 1.1% of pairs are longer and dropped.
  config.data.batch_size = 64  # 64 rows x 64 tokens per step.

  config.optimizer.warmup_steps = 300  # Peak lr = 256^-0.5 * 300^-0.5 = 3.6e-3 at step 300.

  config.train.steps = 600
  config.train.log_every = 50
  config.train.eval_every = 200
  config.train.checkpoint_every = 200
  return config
