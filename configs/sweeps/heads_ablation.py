"""The paper's Table 3 rows (A): the base model with h heads of d_k = d_v = d_model / h at fixed d_model = 512.

    python -m launch --sweep=configs/sweeps/heads_ablation.py --backend=slurm --partition=gpu
    python -m launch --sweep=configs/sweeps/heads_ablation.py --backend=tpu_vm --tpu_name=my-v4-32

| h | 1 | 4 | 8 | 16 | 32 |
|---|---|---|---|---|---|
| d_k = d_v | 512 | 128 | 64 | 32 | 16 |

jformer derives d_k from d_model / num_heads (there is no d_k key), so the rows zip h with d_model held at 512;
the point names read `num_heads=N,d_model=512`. Each row trains the base recipe (100k steps) on the base config's
data, as in the paper (which reports dev-set perplexity and BLEU per row).
"""

from launch import sweep

BASE = "configs/transformer_base.py"
ROWS = ((1, 512), (4, 128), (8, 64), (16, 32), (32, 16))  # (h, d_k) of Table 3 (A).
D_MODEL = 512
SLURM = {"nodes": 1, "gpus_per_node": 8, "time": "24:00:00"}
TPU = {"name": "jformer-v4-32", "zone": "us-central2-b", "accelerator_type": "v4-32"}


def get_sweep():
  assert all(h * d_k == D_MODEL for h, d_k in ROWS), "d_k = d_model / h"
  return sweep.zip(sweep.axis("model.num_heads", [h for h, _ in ROWS]),
                   sweep.axis("model.d_model", [D_MODEL] * len(ROWS)))
