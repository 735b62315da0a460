"""Every registered attention variant (`jformer attention list`) on the demo config, 100 steps each.

    python -m launch --sweep=configs/sweeps/attention_variants.py          # here, one point after another
    python -m launch.report --sweep=configs/sweeps/attention_variants.py   # runs/attention_variants/report.md

The variant list is read from the registry when the sweep is expanded, so a new variant joins by itself. The runs
are short (a vocabulary trained on 30k sentences, 100 steps of 16 rows, one eval, greedy BLEU on 100 test
sentences) to take about two minutes per point on 2 CPU cores, about half of it preparing the point's data: a
smoke test and a speed comparison of the variants (tokens/s), not a quality one.
"""

BASE = "configs/demo.py"
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
# Values of the options a variant requires (`jformer attention list`); a new variant that requires one not set
# here fails the sweep's validation, naming it.
REQUIRED_OPTIONS = {"local": {"window_size": 16}}


def get_sweep():
  from jformer import attention

  return [{"model.attention": name, **{f"model.attention_options.{option}": value
                                       for option, value in REQUIRED_OPTIONS.get(name, {}).items()}}
          for name in attention.available()]
