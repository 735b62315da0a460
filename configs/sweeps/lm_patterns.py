"""Layer patterns of the LM demo at equal wall clock: all-global, 1:1, 3:1 and 5:1 local:global, and the
linear / softmax hybrid (Gemma 2 interleaves 1:1, Gemma 3 5:1; Based and Jamba-style stacks mix linear and softmax
layers).

    python -m launch --sweep=configs/sweeps/lm_patterns.py           # here, one point after another
    python -m launch.report --sweep=configs/sweeps/lm_patterns.py    # runs/lm_patterns/report.md, extrapolation.png
    python benchmarks/record_sweep.py --sweep=configs/sweeps/lm_patterns.py --decode_cache_at=4096 \
        --json=benchmarks/results/sweep_lm_patterns.json --figure=docs/results/lm_patterns.png

Every point trains `configs/lm_local_global.py` (the LM demo with 6 decoder layers, rotary positions of base
10,000 in local and 1,000,000 in global layers, local window 128 of the 256-token training context) for
`train.budget_minutes` of wall clock, with the warm-up and cool-down of configs/sweeps/lm_blocks.py; only
`model.layer_pattern` (and for the hybrid `model.layer_kinds`) differs. A pattern shorter than the depth repeats
(3:1 over 6 layers: local x 3, global, local x 2); the hybrid's kinds replace the config's (linear, linear,
softmax, rotary base 10,000 in all). Two seeds per pattern. The record (benchmarks/record_sweep.py, table and
plot in docs/results/sweeps.md): valid bits per byte, test bits per byte at 256/512/1024, tokens/s, the train
step's temporary memory, and the decode cache of one row at 4,096 positions (what each layer keeps,
`jformer.attention.decode_state`: a global layer every position, a local one 128, a linear one its state).
"""

from launch import sweep

BASE = "configs/lm_local_global.py"
PATTERNS = {
    "all global": ("global",),
    "1:1": ("local", "global"),
    "3:1": ("local",) * 3 + ("global",),
    "5:1": ("local",) * 5 + ("global",),
}
HYBRID = {"model.layer_kinds": {"linear": {"attention": "linear"}, "global": {"attention": "auto"}},
          "model.layer_pattern": ("linear", "linear", "global")}
SEEDS = (0, 1)
FIXED = {
    "train.budget_minutes": 3.0,
    "optimizer.warmup_steps": 40,
    "optimizer.learning_rate_scale": 0.45,  # the LM demo's peak learning rate after the short warm-up.
    "optimizer.cooldown_fraction": 0.2,
    "train.eval_every": 1000,
    "train.checkpoint_every": 1000,
    "train.log_every": 20,
}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "00:30:00"}


def row_of(overrides: dict) -> str:
  """The row name of a point's overrides (its seeds left out): a PATTERNS name, or "hybrid"."""
  if "model.layer_kinds" in overrides:
    return "hybrid (linear, linear, softmax)"
  pattern = tuple(overrides["model.layer_pattern"])
  return next(name for name, known in PATTERNS.items() if known == pattern)


def get_sweep():
  """Each pattern, then the hybrid, each with two seed pairs (train.seed = data.seed)."""
  seeds = sweep.zip(sweep.axis("train.seed", SEEDS), sweep.axis("data.seed", SEEDS))
  rows = [{"model.layer_pattern": pattern} for pattern in PATTERNS.values()] + [HYBRID]
  return [{**row, **seed} for row in rows for seed in seeds]
