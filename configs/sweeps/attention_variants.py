"""Every registered attention variant (`jformer list attention`) on configs/small.py (the demo's model and data,
fixed recipe), 100 steps each.

    python -m launch --sweep=configs/sweeps/attention_variants.py          # here, one point after another
    python -m launch.report --sweep=configs/sweeps/attention_variants.py   # runs/attention_variants/report.md

The variant list is read from the registry when the sweep is expanded (the variants this translation model can use:
those that run decode steps and take its encoder's calls, which are not causal), so a new variant joins by itself,
with the options `AttentionVariant.runnable_options` gives it (a required option gets its `example_options` value).
The runs are short (a vocabulary trained on 30k sentences, 100 steps of 16 rows, one eval, greedy BLEU on 100 test
sentences) to take about two minutes per point on 2 CPU cores, about half of it preparing the point's data: a
smoke test and a speed comparison of the variants (tokens/s), not a quality one.
"""

BASE = "configs/small.py"
FIXED = {
    "data.spm_max_sentences": 30_000,  # SentencePiece on a sample: ~8s instead of ~1 min.
    "train.steps": 100,
    "data.batch_size": 16,
    "train.log_every": 10,
    "train.eval_every": 100,  # One eval on the valid split, at the end.
    "train.checkpoint_every": 100,
    "train.bleu_examples": 100,  # The final BLEU decodes 100 test sentences, not the whole split,
    "decode.method": "greedy",  # greedily: beam search would take longer than the training.
}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "00:30:00"}
# This sweep's experimental choice for the `local` point, not an option it needs: a window of 16 at the demo's
# length 64 (the default window, 256, would make `local` full attention here and so say nothing about windows).
LOCAL_WINDOW = 16


def get_sweep():
  import jax

  from jformer import attention

  encoder_call = [jax.ShapeDtypeStruct((1, 8, 1, 8), "float32")] * 3  # query, key, value without causal masking
  points = []
  for name in attention.available():
    if "decode" not in attention.get(name).supports:  # library kernels (cudnn, splash, pallas_gpu): `auto` runs
      continue  # them where they can express the call; as `model.attention` the model refuses them.
    if attention.get(name).refusal(*encoder_call):  # causal only (stick_breaking): an LM's variant.
      continue
    chosen = {"window_size": LOCAL_WINDOW} if name == "local" else {}
    # The registry's rule: defaults, the example value of any required option, this sweep's choice on top.
    options = attention.get(name).runnable_options(chosen)
    points.append({"model.attention": name,
                   **{f"model.attention_options.{option}": value for option, value in options.items()}})
  return points
