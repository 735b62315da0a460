"""How configs/demo.py's batch size and learning rate were chosen: each point trains the demo for the number of steps
15 minutes buy at its batch size on a 2-core CPU (`STEPS`, from the time budget's plans), without the budget, and
is judged on its final valid loss (`eval_loss` in results.json). The test split plays no part in the choice.

    python -m launch --sweep=configs/sweeps/demo_recipe.py
    python -m launch.report --sweep=configs/sweeps/demo_recipe.py

Points that reach their peak learning rate fast stall for hundreds of steps (post-norm; the paper's warm-up exists
for this); the chosen point is configs/demo.py's.
"""

import pathlib

from jformer import config as config_lib

SLOW_MACHINE = pathlib.Path(__file__).with_name("demo_slow_machine.py")
POST_LN_DEMO = config_lib.import_file(SLOW_MACHINE, "sweep", "").POST_LN_DEMO  # The demo's block then.

BASE = "configs/demo.py"
FIXED = {"train.budget_minutes": 0.0, "train.eval_every": 200, **POST_LN_DEMO}  # The block measured then.
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "01:00:00"}
STEPS = {64: 750, 32: 1400, 16: 2800}  # Steps that 15 minutes buy per batch size on a 2-core AVX-512 CPU.
POINTS = (  # (rows per step, warm-up steps, learning-rate scale, cool-down fraction)
    (64, 300, 1.0, 0.2), (64, 150, 0.707, 0.2), (32, 300, 1.0, 0.2), (32, 300, 0.707, 0.2), (32, 300, 0.707, 0.4),
    (32, 150, 0.5, 0.2), (32, 600, 1.0, 0.2), (16, 300, 0.5, 0.2), (16, 300, 0.707, 0.2), (16, 600, 0.707, 0.2))


def get_sweep():
  return [{"data.batch_size": rows, "train.steps": STEPS[rows], "optimizer.warmup_steps": warmup,
           "optimizer.learning_rate_scale": scale, "optimizer.cooldown_fraction": cooldown}
          for rows, warmup, scale, cooldown in POINTS]
