"""The demo: the small Transformer of configs/small.py trained for 15 minutes of wall clock on the bundled
English-German corpus (2 CPU cores), with the keys that depend on the data and the budget chosen by rules.

    jformer train --config=configs/demo.py --workdir=runs/demo

`train.budget_minutes=15` fixes the number of steps from the step time measured at the start, so a faster machine
trains more steps and a slower one fewer; `optimizer.cooldown_fraction=0.2` then ramps the learning rate linearly
to 0 over the last fifth of those steps (the paper's eq. 3 before; a run of known length ends better cooled down,
Zhai et al. 2022). `model.dtype="auto"` computes in bfloat16 where the CPU multiplies it natively (AVX512_BF16 or
AMX), in float32 elsewhere.

Batch and learning rate were chosen on the valid loss at equal steps (configs/sweeps/demo_recipe.py): 32 rows per
step (a CPU's tokens/s hold at half the rows, so twice the updates) with the peak learning rate
256^-0.5 * 600^-0.5 = 2.6e-3 reached at step 600. Faster warm-ups to higher peaks stalled: the post-norm model
needs the slow start (the paper's reason for the warm-up).

The rules (`train.recipe`, jformer/config/recipe.py; each a bracket table read top down, bounds inclusive) run when
a run starts: it measures the train split, estimates the steps the budget buys on this machine, and prints what it
chose and why (configs/own_corpus.py: the same on your corpus). A key given on the command line keeps its value.
- vocabulary from the number of pairs: a small corpus sees each subword of a large vocabulary too rarely to learn
  it (Sennrich & Zhang 2019, "Revisiting Low-Resource Neural Machine Translation": smaller vocabularies for
  smaller corpora). On the bundled 111k pairs 8000 beat 4000 at equal wall clock (BLEU 29.2 against 26.5, one run
  each: configs/sweeps/demo_vocab.py, docs/results/sweeps.md); the smaller brackets follow the paper, not a
  measurement.
- dropout from the estimated passes over the training tokens: the paper's 0.1 where the data is seen a few times;
  a corpus seen many times in the budget overfits without more (Sennrich & Zhang's 0.3 for small corpora).
"""

import pathlib

from jformer import config as jconfig

HERE = pathlib.Path(__file__).parent

RULES = (
    ("model.vocab_size", "examples", ((20_000, 2000), (60_000, 4000), (None, 8000))),
    ("model.dropout_rate", "passes", ((5, 0.1), (10, 0.2), (None, 0.3))),
)


def get_config():
  config = jconfig.read(HERE / "small.py")
  config.model.dtype = "auto"  # bfloat16 where the CPU (or a GPU/TPU) multiplies it natively, else float32.
  config.data.batch_size = 32  # 32 rows x 64 tokens per step.
  config.optimizer.warmup_steps = 600  # Peak lr = 256^-0.5 * 600^-0.5 = 2.6e-3 at step 600 (eq. 3).
  config.train.eval_every = 500  # Evaluations count against the budget.
  config.train.checkpoint_every = 500
  config.train.budget_minutes = 15.0  # Training steps planned from the measured step time (replaces train.steps).
  config.optimizer.cooldown_fraction = 0.2  # The last 20% of the planned steps: learning rate linearly to 0.
  config.train.recipe = RULES  # Sets model.vocab_size and model.dropout_rate at start-up (above).
  return config
