"""Dropout against the passes over the data, on small corpora, scored on the checkpoint the run keeps: configs/demo.py
(its modern block, `train.keep_best="valid_bleu"`) with dropout 0.1 (the demo's) and 0.3, on gettext corpora of 5k,
18k and 50k pairs (about 39, 11 and 4 passes in 1,350 steps), two seeds each; and the demo as shipped on 18k pairs of
user-help prose (benchmarks/help_corpus.py), the run of README's small-corpus claim.

    for n in 5000:5k 18000:18k 50000:50k; do
      python benchmarks/corpus_subsets.py --pairs=${n%%:*} --out=runs/corpora/gettext_${n##*:}; done
    python benchmarks/help_corpus.py --from_stored --pairs=18000 --out=runs/corpora/help_18k
    nice -n 19 python -m launch --sweep=configs/sweeps/demo_small_corpora.py     # one point after another
    for point in runs/demo_small_corpora/*/; do                                  # the last step's test BLEU too
      jformer evaluate --workdir=$point --split=test --checkpoint=latest && \
        mv $point/evaluate_test_64.json $point/evaluate_test_64_latest.json; done
    python benchmarks/record_sweep.py --sweep=configs/sweeps/demo_small_corpora.py --root=runs \
        --json=benchmarks/results/sweep_demo_small_corpora.json --figure=docs/results/demo_small_corpora.png

Equal steps, not equal wall clock: every point trains STEPS steps without the time budget, the steps the demo's 15
minutes buy on the slowest machine recorded (configs/sweeps/demo_slow_machine.py), because the machine these points
ran on was shared and its minutes bought different steps from one point to the next. Dropout does not change the step
time materially (the mask is a hash of the position, jformer/ops/dropout.py), so equal steps stand for equal wall
clock. The run keeps its best checkpoint by the valid BLEU of 200 valid sentences at each evaluation (every 500 steps
and the last) and tests it; the test BLEU of the last step is beside it (`jformer evaluate --checkpoint=latest`).
Label smoothing and weight decay were left out for time (the machine was shared by several people's jobs).
"""

import pathlib

from jformer import config as config_lib

SLOW = config_lib.import_file(pathlib.Path(__file__).with_name("demo_slow_machine.py"), "sweep", "")
BASE = "configs/demo.py"
STEPS = SLOW.STEPS  # 1,350: README command 1's planned steps on the slowest machine recorded.
FIXED = {"train.budget_minutes": 0.0, "train.steps": STEPS}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "00:30:00"}
CORPORA = {"gettext 5k": "runs/corpora/gettext_5k", "gettext 18k": "runs/corpora/gettext_18k",
           "gettext 50k": "runs/corpora/gettext_50k", "help 18k": "runs/corpora/help_18k"}
DROPOUTS = (0.1, 0.3)  # The demo's, and the most the earlier rules gave (configs/sweeps/demo_corpus_size.py).
SEEDS = (0, 1)
REPORT_KEYS = ("model.dropout_rate",)


def row_of(overrides: dict) -> str:
  """'<corpus>, dropout <p>', e.g. 'gettext 5k, dropout 0.3'."""
  corpus = next(name for name, path in CORPORA.items() if path == overrides["data.path"])
  return f"{corpus}, dropout {overrides['model.dropout_rate']}"


def get_sweep():
  """The demo on the help corpus first (README's run), then each gettext size's rows with both seeds (most passes
  first), and the help corpus's second seed: a sweep stopped early has whole sizes with their seeds."""
  help_demo = {"data.path": CORPORA["help 18k"], "model.dropout_rate": 0.1}
  sized = [{"data.path": CORPORA[corpus], "model.dropout_rate": dropout, "train.seed": seed}
           for corpus in ("gettext 5k", "gettext 50k", "gettext 18k") for seed in SEEDS for dropout in DROPOUTS]
  return [{**help_demo, "train.seed": SEEDS[0]}, *sized, {**help_demo, "train.seed": SEEDS[1]}]
