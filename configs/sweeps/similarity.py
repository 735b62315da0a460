"""The similarity function of attention (paper Sec. 3.2.1) on configs/small.py: scaled dot product, unscaled dot
product, bilinear ("general"), additive (Bahdanau) and cosine scores, everything else the demo's.

    python -m launch --sweep=configs/sweeps/similarity.py          # here, one point after another
    python -m launch.report --sweep=configs/sweeps/similarity.py   # runs/similarity/report.md, curves.png

What it measures, per scorer (`python -m launch.report` columns): test BLEU (beam 4, alpha 0.6, detokenized cased
sacreBLEU on the whole 1,500-sentence test split), valid loss, accuracy and perplexity (at steps 100, 200, 300:
the curves), training tokens/s, and `step_temp_mib`, the compiled train step's temporary memory (XLA's
`memory_analysis()`, per device). Paper Sec. 3.2.1 says dot-product attention is faster and more space-efficient
than additive attention, the two perform alike for small d_k, and additive beats dot products without the
1/sqrt(d_k) scale for larger d_k (here d_k = 64); `general` and `cosine` are two learned alternatives
(`jformer list attention`).

configs/small.py (the demo's data, vocabulary and model; batch 64 x 64, warm-up 300, no dropout) with
`train.steps` reduced from 600 to 300 (the end of the warm-up: the points are compared early in training, not
converged), so that the five points take about an hour on 2 CPU cores (additive steps cost about twice the others:
its `[B, H, cq, ck, hidden]` tanh block; docs/results/train_step.md).
"""

from launch import sweep

BASE = "configs/small.py"
SCORERS = ("dot_product", "dot_product_unscaled", "general", "additive", "cosine")
FIXED = {
    "train.steps": 300,  # The demo's 600 halved: five points in about 60 minutes of 2 CPU cores.
    "train.eval_every": 100,  # Valid loss/perplexity at 100, 200, 300 (the demo: every 200 of 600).
}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "01:00:00"}


def get_sweep():
  return sweep.axis("model.attention", SCORERS)
