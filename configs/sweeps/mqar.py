"""The Zoology grid (Arora et al. 2023) on 2 CPU cores: multi-query associative recall per attention variant,
against model width, at sequence lengths 64 and 128 with pairs growing with them.

    python -m launch --sweep=configs/sweeps/mqar.py            # here, one point after another
    python -m launch.report --sweep=configs/sweeps/mqar.py     # runs/mqar/report.md, best.png

Every point trains configs/mqar.py (a 2-layer decoder, pre-norm, no dropout, the task's 64-token vocabulary; loss
and accuracy on the answers only) for its STEPS with one (sequence length, pairs) of GRID, one width of WIDTHS
(d_model; d_ff = 4 x d_model, 2 heads), one learning-rate scale of LEARNING_RATE_SCALES (the Noam schedule's, peak
at the 200-step warm-up's end: 0.25 is configs/mqar.py's; Zoology sweeps the rate and keeps the best per point),
and one row of VARIANTS. A step holds TOKENS_PER_STEP tokens at every length (64 sequences of 64, 32 of 128): as
pairs grow with length, every point sees the same number of answers per step (256). The test split's answer
accuracy is the figure of merit. Zoology's finding: softmax attention solves every grid point at small width,
while linear attention (and gated convolutions) need a width that grows with the number of pairs. `local` sees 16
tokens back, fewer than most of the gaps between a key and its query. The hybrid alternates a linear and a softmax
layer (Based-like).

The budget decides the rest. Measured on 2 cores (docs/results/sweeps.md): at 500 steps dot_product at width 64
learns the 64/4 point (0.999) but not the longer ones (0.14 at 128/8, 0.07 at 256/16). At 128/8 it leaves its
plateau (it knows the pairs' values, not which one) between steps 2,000 and 2,500 (valid accuracy 0.24, then 0.95;
1.000 at 3,000, 2.5 minutes); at 256/16 it is still on it after 8,000 steps (0.135, 10 minutes). So STEPS trains
64/4 for 500 steps and 128/8 for 3,000; the 128/8 points run at the middle learning-rate scale only and leave
`additive` out (its [T, S, d] scores make a 64-token point 4-8x the others'); 256/16 is not in the grid. The 54
points at 64/4 take about an hour, the 15 at 128/8 about an hour more.
"""

from launch import sweep

BASE = "configs/mqar.py"
GRID = ((64, 4), (128, 8))  # (sequence length, key-value pairs): Zoology's first two points (not 256/16: see above).
STEPS = {(64, 4): 500, (128, 8): 3000}  # training steps per point: dot_product's at width 64, and a margin.
WIDTHS = (32, 64, 128)
LEARNING_RATE_SCALES = (0.1, 0.25, 0.6)
TOKENS_PER_STEP = 4096
VARIANTS = {
    "dot_product": {"model.attention": "dot_product"},
    "linear": {"model.attention": "linear"},
    "local": {"model.attention": "local", "model.attention_options": {"window_size": 16}},
    "cosine": {"model.attention": "cosine"},
    "hybrid (linear, softmax)": {"model.layer_kinds": {"linear": {"attention": "linear"},
                                                       "softmax": {"attention": "dot_product"}},
                                 "model.layer_pattern": ("linear", "softmax")},
    "additive": {"model.attention": "additive"},  # last: its [T, S, d] scores make a point 4-5x the others'
}
FIXED = {"train.eval_every": 250, "train.checkpoint_every": 500, "train.log_every": 100}
# `jformer sweep-report`: the best test accuracy over the learning rates against width, per variant, one panel per
# (length, pairs) (launch/best_of.py).
FIGURE = {"metric": "test_accuracy", "x": "model.d_model",
          "panels": ("data.dataset_options.seq_len", "data.dataset_options.num_kv_pairs"),
          "best_over": "optimizer.learning_rate_scale"}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "00:20:00"}


def grid_point(seq_len: int, pairs: int) -> dict:
  """The overrides of one (sequence length, pairs) point: the generator's options, both maximum lengths, the batch
  of TOKENS_PER_STEP tokens and the point's STEPS."""
  return {"data.dataset_options.seq_len": seq_len, "data.dataset_options.num_kv_pairs": pairs,
          "data.max_length": seq_len, "model.max_length": seq_len, "data.batch_size": TOKENS_PER_STEP // seq_len,
          "train.steps": STEPS[seq_len, pairs]}


def width(d_model: int) -> dict:
  return {"model.d_model": d_model, "model.d_ff": 4 * d_model}


def row_of(overrides: dict) -> str:
  """The VARIANTS name of a point's overrides."""
  return next(name for name, row in VARIANTS.items() if all(overrides.get(k) == v for k, v in row.items()))


def get_sweep():
  """Each variant over the widths and learning-rate scales at the first point of GRID; at the longer points, every
  variant but `additive` over the widths at the middle scale (the module docstring says why). The grid point is
  outermost, so that the first (shortest) point's panel is complete first."""
  first, *longer = GRID
  widths = [width(d) for d in WIDTHS]
  every_rate = sweep.product([grid_point(*first)], [dict(row) for row in VARIANTS.values()], widths,
                             sweep.axis("optimizer.learning_rate_scale", LEARNING_RATE_SCALES))
  middle_rate = sweep.product([grid_point(*point) for point in longer],
                              [dict(row) for name, row in VARIANTS.items() if name != "additive"], widths,
                              sweep.axis("optimizer.learning_rate_scale", LEARNING_RATE_SCALES[1:2]))
  return every_rate + middle_rate
