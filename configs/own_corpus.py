"""Translation on your own corpus: configs/demo.py's model (its modern block), schedule and 15-minute budget on the
folder `data.path` names.

    jformer train --config=configs/own_corpus.py --config.data.path=DIR --workdir=runs/mine

DIR holds aligned {train,valid,test}.{src,tgt}[.gz] files, one sentence per line, line i of .tgt translating line
i of .src (valid is evaluated during training, test is decoded for BLEU at the end). The vocabulary (8000 pieces)
and dropout (0.1) are the demo's whatever the corpus size: choosing them from the corpus lost to these values on
corpora of 5k to 18k pairs in two domains (configs/demo.py says where); the start-up line prints your corpus's
pairs and tokens and the steps and passes the budget buys beside them. Any key can be set on the command line
(`--config.model.dropout_rate=0.2`), and the budget changed with `--config.train.budget_minutes=M`; rules of your
own (`--config.train.recipe=...`, jformer/config/recipe.py) replace the demo's.
"""

import pathlib

from jformer import config as jconfig

HERE = pathlib.Path(__file__).parent


def get_config():
  return jconfig.read(HERE / "demo.py")
