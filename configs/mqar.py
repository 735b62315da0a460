"""Multi-query associative recall (MQAR, Zoology's first grid point: 64 tokens, 4 key-value pairs) with a 2-layer
decoder of width 64, meant to reach high answer accuracy in a few minutes on 2 CPU cores.

    jformer train --config=configs/mqar.py --workdir=runs/mqar
    jformer train --config=configs/mqar.py --workdir=runs/mqar_linear --config.model.attention=linear
    jformer evaluate --workdir=runs/mqar --split=test

Loss and accuracy count only the answer positions (the queried keys' values); results.json holds the test split's
answer accuracy and whole-example exact match. The vocabulary is the task's own token ids: model.vocab_size is
the task's (3 reserved ids + dataset_options.vocab_size), data.max_length and model.max_length its seq_len.
"""

from jformer.config import base_config

SEQ_LEN = 64
VOCAB = 64  # task tokens: keys 1..31, values 32..63 (Zoology uses 8192; a small vocabulary trains in minutes).


def get_config():
  config = base_config()
  model = config.model
  model.architecture = "synthetic"  # decoder-only; loss and accuracy on the answers only.
  model.attention = "dot_product"
  model.vocab_size = 3 + VOCAB  # pad, eos, unk, then the task's tokens.
  model.d_model = 64
  model.num_heads = 2
  model.d_ff = 256
  model.num_decoder_layers = 2
  model.dropout_rate = 0.0
  model.norm = "pre"
  model.max_length = SEQ_LEN
  model.dtype = "float32"

  data = config.data
  data.dataset = "mqar"
  data.dataset_options = dict(vocab_size=VOCAB, seq_len=SEQ_LEN, num_kv_pairs=4)
  data.max_length = SEQ_LEN
  data.batch_size = 64
  data.eval_batch_size = 100  # the valid and test splits hold 1,000 examples each (dataset_options.eval_examples).

  config.optimizer.warmup_steps = 100  # Peak lr = 64^-0.5 * 100^-0.5 = 1.25e-2 at step 100.
  config.optimizer.grad_clip_norm = 1.0

  train = config.train
  train.steps = 400
  train.label_smoothing = 0.0
  train.log_every = 50
  train.eval_every = 100
  train.checkpoint_every = 200
  return config
