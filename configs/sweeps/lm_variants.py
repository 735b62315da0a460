"""Length extrapolation of the LM demo: each positional encoding, and the long-context attention variants, trained
at context 256 and evaluated at 256, 512 and 1024 (issue 14; Press et al. 2022 claim ALiBi extrapolates where
sinusoidal does not).

    python -m launch --sweep=configs/sweeps/lm_variants.py          # here, one point after another
    python -m launch.report --sweep=configs/sweeps/lm_variants.py   # runs/lm_variants/report.md, extrapolation.png

Nine points on configs/lm_demo.py with the pre-LayerNorm block it had then (FIXED; decoder-only, d_model 256, 4
layers, rows of 256 tokens packed from whole chapters of the bundled English corpus, model.max_length 1024): the
six positional encodings with the demo's attention (`model.positional` = sinusoidal, learned, rotary, alibi,
relative, none), then the long-context
attention variants with sinusoidal positions: `chunked` (exact softmax attention in chunks of 64 queries x 64
keys, so the memory saving shows at 256), `local` (a sliding window of 128 tokens, half the training context,
so that it differs from full attention in training too) and `linear` (kernelized, no softmax). Swept keys a point
does not set come from FIXED (the table shows them). Reading the report: `test_bits_per_byte@256/512/1024` (test
split, every token once, each document cut into pieces of at most that many tokens), `eval_bits_per_byte` (valid)
beside `xz_bits_per_byte` (xz -9 on valid given train), tokens/s and `step_temp_mib` (the compiled train step's
temporary memory per device); `extrapolation.png` plots bits per byte against context (log2 axis).

The demo's recipe with `train.steps` halved, from 400 to 200 (the end of its 200-step learning-rate warm-up: the
points are compared early in training, on 200 x 16 x 256 = 0.8M tokens, not converged) and one valid evaluation at
the end: a few minutes per point on 2 CPU cores (each point's `train_seconds` is in its results.json).
"""

from launch import sweep

BASE = "configs/lm_demo.py"
POSITIONAL = ("sinusoidal", "learned", "rotary", "alibi", "relative", "none")
# Long-context attention variants (with sinusoidal positions) and this sweep's options for them.
LONG_CONTEXT = {
    "chunked": {"query_chunk_size": 64, "key_chunk_size": 64},
    "local": {"window_size": 128},
    "linear": {},
}
FIXED = {
    "train.steps": 200,  # The demo's 400 halved: nine points in about 40 minutes of 2 CPU cores.
    "train.eval_every": 200,  # One valid evaluation, at the end.
    "train.checkpoint_every": 200,
    "train.log_every": 50,
    "model.positional": "sinusoidal",  # The long-context points' positions (and the table's value for them).
    "model.attention": "auto",  # The positional points' attention, the demo's (and the table's value for them).
    # The pre-LayerNorm block this sweep was recorded with (the LM demo's block until the block ablation).
    "model.normalization": "layernorm", "model.activation": "relu", "model.d_ff": 1024, "model.qk_norm": False,
    "model.z_loss": 0.0, "model.use_bias": True,
}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "01:00:00"}


def get_sweep():
  """The union of two axes (not their product): 6 positional encodings, then 3 attention variants."""
  long_context = [{"model.attention": name, **{f"model.attention_options.{k}": v for k, v in options.items()}}
                  for name, options in LONG_CONTEXT.items()]
  return sweep.axis("model.positional", POSITIONAL) + long_context
