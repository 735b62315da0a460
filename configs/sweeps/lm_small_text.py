"""Dropout against the passes over a small text, scored on the checkpoint the run keeps: configs/lm_demo.py (its
`train.keep_best="valid_bits_per_byte"`) on 200k bytes of the bundled novels (benchmarks/text_subset.py; valid and
test as bundled), with dropout 0.3 (what its rule gives this many passes), 0.1 and 0.5, two seeds each.

    python benchmarks/text_subset.py --bytes=200000 --out=runs/corpora/novels_200k
    nice -n 19 python -m launch --sweep=configs/sweeps/lm_small_text.py     # one point after another
    python benchmarks/record_sweep.py --sweep=configs/sweeps/lm_small_text.py --root=runs \
        --json=benchmarks/results/sweep_lm_small_text.json --figure=docs/results/lm_small_text.png

Equal steps, not equal wall clock: every point trains STEPS steps without the time budget, what the LM demo's 10
minutes bought on a text this small alone on a 2-core machine (benchmarks/results/lm_baseline.json: 1,108 steps on
the 0.7 MB gettext text at its 2000-piece vocabulary, which the rule also gives this text), because the machine these
points ran on was shared and its minutes bought different steps from one point to the next. Dropout does not change
the step time materially (jformer/ops/dropout.py), so equal steps stand for equal wall clock. 1,100 steps of 16 rows
of 256 tokens pass over the ~60k tokens of the text about 70 times. The run keeps its best checkpoint by valid bits
per byte (every 100 steps and the last) and tests it.
"""

BASE = "configs/lm_demo.py"
STEPS = 1100
TEXT = "runs/corpora/novels_200k"
FIXED = {"train.budget_minutes": 0.0, "train.steps": STEPS, "data.path": TEXT}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "00:30:00"}
DROPOUTS = (0.3, 0.1, 0.5)  # The rule's choice first.
SEEDS = (0, 1)
REPORT_KEYS = ("model.vocab_size", "model.dropout_rate")


def row_of(overrides: dict) -> str:
  return f"dropout {overrides['model.dropout_rate']}"


def get_sweep():
  """Seed 0 of every row first, then seed 1, so that a sweep stopped early has every row once."""
  return [{"model.dropout_rate": dropout, "train.seed": seed} for seed in SEEDS for dropout in DROPOUTS]
