"""A training run's data, from its config: the sources' arguments and the SentencePiece vocabulary.

    <workdir>/tfds/    prepared tfds datasets, unless `data.data_dir` names another folder
    <workdir>/vocab/   the SentencePiece model trained for the run, unless `data.vocab_path` names one
"""

from __future__ import annotations

import os

from jformer.data.sources import load_split, pair_texts
from jformer.data.tokenizer import Tokenizer, get_tokenizer


def source_args(config, workdir: str) -> dict:
  """The keyword arguments of `load_split` / `make_datasets` that say where `config.data`'s dataset is read."""
  return dict(path=config.data.path, data_dir=config.data.data_dir or os.path.join(workdir, "tfds"),
              source_lang=config.data.source_lang, target_lang=config.data.target_lang)


def load_tokenizer(config, workdir: str) -> Tokenizer:
  """The run's SentencePiece model: `data.vocab_path`, or trained once into `<workdir>/vocab/` and reused."""
  path = config.data.vocab_path or os.path.join(workdir, "vocab", f"spm_{config.model.vocab_size}.model")
  return get_tokenizer(
      path, lambda: pair_texts(load_split(config.data.dataset, "train", **source_args(config, workdir))),
      vocab_size=config.model.vocab_size, max_sentences=config.data.spm_max_sentences)
