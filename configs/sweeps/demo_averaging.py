"""Does checkpoint averaging help the demo? A point of configs/sweeps/demo_corpus_size.py (1,500 steps) trained
again with `train.average_checkpoints=5` and `train.average_span=0.1`: five checkpoints over the last 150
steps (the learning rate's linear cool-down), their mean scored on the valid split beside the last step's, the
better of the two tested. Averaging only adds saves, so the run's last step is the demo_corpus_size point's: its
test BLEU there is the last step's, here the tested parameters'.

    python -m launch --sweep=configs/sweeps/demo_averaging.py      # here, one point after another (~10 minutes)
    python benchmarks/record_sweep.py --sweep=configs/sweeps/demo_averaging.py --root=runs \
        --json=benchmarks/results/sweep_demo_averaging.json --figure=docs/results/demo_averaging.png
"""

import pathlib

from jformer import config as config_lib

SIZES = config_lib.import_file(pathlib.Path(__file__).with_name("demo_corpus_size.py"), "sweep", "")
BASE = SIZES.BASE
FIXED = {**SIZES.FIXED, "train.average_checkpoints": 5, "train.average_span": 0.1}
SLURM = SIZES.SLURM
REPORT_KEYS = SIZES.REPORT_KEYS


def get_sweep():
  """gettext 107k, where the rules chose 8000 pieces and dropout 0.1 (one point: time)."""
  return [{"data.path": SIZES.CORPORA["gettext 107k"]}]
