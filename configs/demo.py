"""The demo: the small Transformer of configs/small.py trained for 15 minutes of wall clock on the bundled
English-German corpus (2 CPU cores).

    jformer train --config=configs/demo.py --workdir=runs/demo

`train.budget_minutes=15` fixes the number of steps from the step time measured at the start, so a faster machine
trains more steps and a slower one fewer; `optimizer.cooldown_fraction=0.2` then ramps the learning rate linearly
to 0 over the last fifth of those steps (the paper's eq. 3 before; a run of known length ends better cooled down,
Zhai et al. 2022). `model.dtype="auto"` computes in bfloat16 where the CPU multiplies it natively (AVX512_BF16 or
AMX), in float32 elsewhere. The paper's dropout 0.1 (with its label smoothing 0.1): a smaller corpus of this kind
is seen several times in 15 minutes and overfits without it.

Batch and learning rate were chosen on the valid loss at equal steps (configs/sweeps/demo_recipe.py): 32 rows per
step (a CPU's tokens/s hold at half the rows, so twice the updates) with the peak learning rate
256^-0.5 * 600^-0.5 = 2.6e-3 reached at step 600. Faster warm-ups to higher peaks stalled: the post-norm model
needs the slow start (the paper's reason for the warm-up).
"""

import pathlib

from jformer import config as jconfig

HERE = pathlib.Path(__file__).parent


def get_config():
  config = jconfig.read(HERE / "small.py")
  config.model.dropout_rate = 0.1  # Paper P_drop.
  config.model.dtype = "auto"  # bfloat16 where the CPU (or a GPU/TPU) multiplies it natively, else float32.
  config.data.batch_size = 32  # 32 rows x 64 tokens per step.
  config.optimizer.warmup_steps = 600  # Peak lr = 256^-0.5 * 600^-0.5 = 2.6e-3 at step 600 (eq. 3).
  config.train.eval_every = 500  # Evaluations count against the budget.
  config.train.checkpoint_every = 500
  config.train.budget_minutes = 15.0  # Training steps planned from the measured step time (replaces train.steps).
  config.optimizer.cooldown_fraction = 0.2  # The last 20% of the planned steps: learning rate linearly to 0.
  return config
