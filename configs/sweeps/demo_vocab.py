"""The demo's vocabulary at equal wall clock: configs/demo.py (15-minute budget, dropout 0.1) with the shared
SentencePiece vocabulary of 8000 pieces it had before its rules, and with 4000, on the bundled 111k pairs. A smaller
vocabulary makes a step cheaper (the output layer and its softmax) and gives each piece more updates; the evidence
behind the demo's 8000 pieces (configs/demo.py).

    python -m launch --sweep=configs/sweeps/demo_vocab.py          # here, one point after the other (~35 minutes)
    python benchmarks/record_sweep.py --sweep=configs/sweeps/demo_vocab.py --root=runs \
        --json=benchmarks/results/sweep_demo_vocab.json --figure=docs/results/demo_vocab.png   # docs/results

The valid losses are per token of different vocabularies (a 4k token is shorter), so compare BLEU, not losses.
"""

import pathlib

from jformer import config as config_lib

SLOW_MACHINE = pathlib.Path(__file__).with_name("demo_slow_machine.py")
POST_LN_DEMO = config_lib.import_file(SLOW_MACHINE, "sweep", "").POST_LN_DEMO  # The demo's block then.

BASE = "configs/demo.py"
# The demo's dropout before its rules and its block then (post-norm): only the vocabulary differs.
FIXED = {"model.dropout_rate": 0.1, **POST_LN_DEMO}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "01:00:00"}


def get_sweep():
  return [{"model.vocab_size": 8000}, {"model.vocab_size": 4000}]
