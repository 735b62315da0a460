"""Translation on your own corpus: configs/demo.py's model, schedule, 15-minute budget and rules, on the folder
`data.path` names.

    jformer train --config=configs/own_corpus.py --config.data.path=DIR --workdir=runs/mine

DIR holds aligned {train,valid,test}.{src,tgt}[.gz] files, one sentence per line, line i of .tgt translating line
i of .src (valid chooses nothing but is reported; test is decoded for BLEU at the end). At start-up the run measures
the train split and estimates the steps the budget buys on this machine, then prints what the rules chose and why:

    recipe: 18,000 pairs, 0.30M words, ~0.5M tokens, ~3,375 steps (0.24 s each, estimated), ~27.1 passes ->
    model.vocab_size 2000 (examples <= 20,000), model.dropout_rate 0.3 (passes > 10)

(18,000 pairs cut from the bundled corpus by `benchmarks/corpus_subsets.py --pairs=18000`, on a 2-core AMD EPYC
with AVX512_BF16.) Any chosen key can be fixed on the command line (`--config.model.dropout_rate=0.2`; the line
then says it was kept), and the budget changed with `--config.train.budget_minutes=M` (the passes follow). The
rules and why they are there: configs/demo.py.
"""

import pathlib

from jformer import config as jconfig

HERE = pathlib.Path(__file__).parent


def get_config():
  return jconfig.read(HERE / "demo.py")
