"""Does each of configs/demo.py's rules earn its place? The demo at 5k, 18k, 50k and 107k training pairs, with its
rules (`train.recipe`) and with each rule's choice replaced by the value the demo had before it (vocabulary 8000,
dropout 0.1), at equal steps. The corpora are cut from the bundled one by software project, so valid and test
come from projects the training pairs do not (benchmarks/corpus_subsets.py); test BLEU is reported, the valid
split is the one to choose on.

    for n in 5000:5k 18000:18k 50000:50k 0:all; do
      python benchmarks/corpus_subsets.py --pairs=${n%%:*} --out=runs/corpora/gettext_${n##*:}; done
    python -m launch --sweep=configs/sweeps/demo_corpus_size.py     # here, one point after another (~95 minutes)
    python benchmarks/record_sweep.py --sweep=configs/sweeps/demo_corpus_size.py --root=runs \
        --json=benchmarks/results/sweep_demo_corpus_size.json --figure=docs/results/demo_corpus_size.png

Every point trains STEPS steps (no time budget, so the points are comparable whatever the machine did meanwhile):
what the demo's 15 minutes buy on the 2-core machines it is slowest on (0.55-0.62 s per step: 1,350-1,600 steps).
With 1,500 steps the rules choose: 5k and 18k pairs -> vocabulary 2000, dropout 0.3 (43 and 12 passes); 50k ->
4000, 0.1 (4.3 passes); 107k -> 8000, 0.1 (2.0 passes). A point that sets a ruled key keeps its value (the
command line wins over a rule).
"""

CORPORA = {"5k": "runs/corpora/gettext_5k", "18k": "runs/corpora/gettext_18k", "50k": "runs/corpora/gettext_50k",
           "107k": "runs/corpora/gettext_all"}
STEPS = 1500
BEFORE = {"model.vocab_size": 8000, "model.dropout_rate": 0.1}  # The demo's values before its rules.
BASE = "configs/demo.py"
FIXED = {"train.budget_minutes": 0.0, "train.steps": STEPS, "train.eval_every": 500}
SLURM = {"nodes": 1, "gpus_per_node": 1, "time": "00:30:00"}
# (corpus, recipe name, the ruled keys it sets): "rules" sets none; "-vocab" and "-dropout" put one rule's key back
# to its value before the rules; "before" both. Where a rule already chooses the old value, its row would repeat
# "rules" and is left out; at 107k pairs "dropout 0.3" asks whether the small corpora's dropout hurts a large one.
ROWS = (
    ("18k", "rules", {}), ("18k", "-vocab", {"model.vocab_size": 8000}),
    ("18k", "-dropout", {"model.dropout_rate": 0.1}), ("18k", "before", BEFORE),
    ("5k", "rules", {}), ("5k", "-vocab", {"model.vocab_size": 8000}), ("5k", "-dropout", {"model.dropout_rate": 0.1}),
    ("50k", "rules", {}), ("50k", "-vocab", {"model.vocab_size": 8000}),
    ("107k", "rules", {}), ("107k", "dropout 0.3", {"model.dropout_rate": 0.3}),
)


def row_of(overrides: dict) -> str:
  """'<corpus> <recipe>', e.g. '18k -vocab'."""
  corpus = next(name for name, path in CORPORA.items() if path == overrides["data.path"])
  keys = {key: value for key, value in overrides.items() if key != "data.path"}
  return next(f"{name} {recipe}" for name, recipe, ruled in ROWS if name == corpus and ruled == keys)


def get_sweep():
  return [{"data.path": CORPORA[corpus], **ruled} for corpus, _, ruled in ROWS]
