"""The LM demo at 16,384 tokens per row, each row split across the devices' `sequence` axis (context parallelism).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
      jformer train --config=configs/lm_long.py --workdir=runs/lm_long      # 8 simulated devices on a CPU
    ... --config.parallel.context_strategy=ring                              # key/value blocks around a ring

`configs/lm_demo.py`'s block (pre-RMSNorm, SwiGLU, rotary positions, QK-norm) and bundled English text, with rows
of 16,384 tokens packed from whole documents: each of the n devices of the mesh's sequence axis (all of them:
`parallel.sequence=-1`) holds 16,384 / n tokens of the row through the whole model, and attention runs over the
split row (`jformer/attention/context_parallel.py`: keys and values gathered, or passed around a ring; causal rows
in the load-balanced order). Per-device activation memory falls with n: docs/results/context_parallel.md. On one
device it runs as an ordinary (slow) long-context model.

Smaller than the demo (d_model 128, 4 layers, a 4k vocabulary) so that a step of 16k tokens takes seconds, not
minutes, on a CPU; layers rematerialised in the backward pass. Not `model.scan_layers`: under `nn.scan` the
blockwise attention's blocks are kept for the backward pass (memory quadratic in the row; XLA's memory analysis at
4,096 tokens, both rematerialised: 0.38 GiB scanned, 0.16 GiB looped).
"""

import pathlib

from jformer import config as jconfig

HERE = pathlib.Path(__file__).parent


def get_config():
  config = jconfig.read(HERE / "lm_demo.py")
  model = config.model
  model.vocab_size = 4000  # fixed (no recipe below): the bundled text's 4k vocabulary.
  model.d_model = 128
  model.num_heads = 4
  model.d_ff = 341  # SwiGLU at 2/3 of 4 d_model.
  model.num_decoder_layers = 4
  model.max_length = 16_384
  model.remat = "full"  # Each layer's activations recomputed in the backward pass (what `auto` does from 1,024).

  data = config.data
  data.max_length = 16_384  # Tokens per row: split over the sequence axis.
  data.batch_size = 1  # One row per step (rows split over data x fsdp when there are more).
  data.eval_batch_size = 1

  parallel = config.parallel
  parallel.data = 1
  parallel.sequence = -1  # Every device holds a share of each row.
  parallel.context_strategy = "gather"  # Or "ring" (keys and values never whole on one device).

  train = config.train
  train.budget_minutes = 0.0  # Steps, not minutes (runs compared at equal steps).
  train.steps = 300
  train.recipe = ()
  train.log_every = 5
  train.eval_every = 100
  train.checkpoint_every = 50
  train.eval_lengths = (16_384,)
  return config
