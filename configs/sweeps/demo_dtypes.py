"""The demo in float32 and in bfloat16 for the same number of steps: does bfloat16 compute (float32 parameters and
optimizer state) learn the same? Issue 15 asks for curves within run-to-run noise and BLEU within 0.5; the third
point, bfloat16 with another seed (parameter init and dropout bits; the same data order), measures that noise.

    python -m launch --sweep=configs/sweeps/demo_dtypes.py          # here, one point after the other
    python -m launch.report --sweep=configs/sweeps/demo_dtypes.py   # runs/demo_dtypes/report.md, curves.png
    python benchmarks/record_sweep.py --sweep=configs/sweeps/demo_dtypes.py --root=runs \
        --json=benchmarks/results/sweep_demo_dtypes.json --figure=docs/results/demo_dtypes.png   # docs/results

configs/demo.py without its time budget: every point trains STEPS steps (what its 15-minute budget plans on a
2-core AVX512_BF16 CPU), cool-down and all, on the same data order; the first two with the same
seed and dropout bits, so the only difference between them is the compute dtype. A budgeted run trains the same
steps as `train.steps` set to its plan (tests/test_train_budget.py), so a demo run that planned STEPS is the
`dtype=bfloat16,seed=0` point's run too.
"""

import pathlib

from jformer import config as config_lib

SLOW_MACHINE = pathlib.Path(__file__).with_name("demo_slow_machine.py")
POST_LN_DEMO = config_lib.import_file(SLOW_MACHINE, "sweep", "").POST_LN_DEMO  # The demo's block then.

BASE = "configs/demo.py"
STEPS = 1487  # A plan of configs/demo.py's 15-minute budget on a 2-core AMD EPYC with AVX512_BF16.
FIXED = {
    "train.budget_minutes": 0.0,  # Equal steps, not equal minutes (float32 steps are slower).
    "train.steps": STEPS,
    **POST_LN_DEMO,  # The block and schedule the rows measured (configs/demo.py's then).
}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "01:00:00"}


def get_sweep():
  return [{"model.dtype": "float32", "train.seed": 0}, {"model.dtype": "bfloat16", "train.seed": 0},
          {"model.dtype": "bfloat16", "train.seed": 1}]
