"""Block ablation of the LM demo at equal wall clock: the paper's block, pre-LayerNorm, the "modern" block, and the
modern block with each of its options removed in turn; two seeds per row.

    python -m launch --sweep=configs/sweeps/lm_blocks.py           # here, one point after another
    python -m launch.report --sweep=configs/sweeps/lm_blocks.py    # runs/lm_blocks/report.md, extrapolation.png

Rows (ROWS; every point is a row's overrides plus a seed pair):
  - `paper`: post-norm, Norm(x + Sublayer(x)), LayerNorm, ReLU, sinusoidal positions, biases (Vaswani et al. 2017);
  - `pre-LN`: x + Sublayer(LayerNorm(x)), otherwise the paper's (the LM demo's block);
  - `modern`: pre-RMSNorm, SwiGLU (d_ff 683 = 2/3 of 1024: the feed-forward's parameters kept), rotary positions,
    QK-norm, z-loss 1e-4, no biases (the LLaMA / PaLM / Gemma family);
  - `modern -X`: the modern block with option X back at the pre-LN block's value.

Every point trains `configs/lm_demo.py` (d_model 256, 4 layers, rows of 256 tokens) for `train.budget_minutes`
of wall clock (the steps are planned from the measured step time, so a slower block trains fewer steps), with a
short warm-up at the demo's peak learning rate and a linear cool-down over the last fifth of the planned steps.
The seeds are the parameter seed (`train.seed`) and the data order (`data.seed`) together. Reading the report:
`test_bits_per_byte@256/512/1024` (test split at each context; trained at 256), `eval_bits_per_byte` (valid, the
one the demo's choice is made on), `tokens_per_second` and `step` (the planned steps).
"""

from launch import sweep

BASE = "configs/lm_demo.py"
# The pre-LN block of configs/lm_demo.py, spelt out: a modern option removed goes back to this value.
PRE_LN = {"model.norm": "pre", "model.normalization": "layernorm", "model.activation": "relu", "model.d_ff": 1024,
          "model.positional": "sinusoidal", "model.qk_norm": False, "model.z_loss": 0.0, "model.use_bias": True}
MODERN = {"model.normalization": "rmsnorm", "model.activation": "swiglu", "model.d_ff": 683,
          "model.positional": "rotary", "model.qk_norm": True, "model.z_loss": 1e-4, "model.use_bias": False}
# Each modern option and the keys that remove it (SwiGLU goes back to ReLU at the plain width).
REMOVALS = {"rmsnorm": ("model.normalization",), "swiglu": ("model.activation", "model.d_ff"),
            "rotary": ("model.positional",), "qk_norm": ("model.qk_norm",), "z_loss": ("model.z_loss",),
            "no_bias": ("model.use_bias",)}
ROWS = {
    "paper": {"model.norm": "post"},
    "pre-LN": {},
    "modern": MODERN,
    **{f"modern -{option}": {key: value for key, value in MODERN.items() if key not in keys}
       for option, keys in REMOVALS.items()},
}
SEEDS = (0, 1)
FIXED = {
    **PRE_LN,
    "train.budget_minutes": 3.0,  # 18 points in about 75 minutes of 2 CPU cores (compile and evaluations outside).
    "optimizer.warmup_steps": 40,  # A budget of ~170 steps (0.7M tokens): a short warm-up ...
    "optimizer.learning_rate_scale": 0.45,  # ... to the demo's peak, 0.45 * 256^-0.5 * 40^-0.5 = 4.4e-3 ...
    "optimizer.cooldown_fraction": 0.2,  # ... and a linear cool-down to 0 over the last fifth.
    "train.eval_every": 1000,  # The valid evaluation of the plan and the one at the end.
    "train.checkpoint_every": 1000,
    "train.log_every": 20,
}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "00:30:00"}


def row_of(overrides: dict) -> str:
  """The ROWS name of a point's overrides (its seeds left out)."""
  block = {key: value for key, value in overrides.items() if key not in ("train.seed", "data.seed")}
  return next(name for name, row in ROWS.items() if row == block)


def get_sweep():
  """Every row of ROWS with each seed pair (train.seed = data.seed), the row's seeds one after the other."""
  seeds = sweep.zip(sweep.axis("train.seed", SEEDS), sweep.axis("data.seed", SEEDS))
  return [{**row, **seed} for row in ROWS.values() for seed in seeds]
