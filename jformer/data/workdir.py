"""A training run's data, from its config: the sources' arguments and the SentencePiece vocabulary.

    <workdir>/tfds/    prepared tfds datasets, unless `data.data_dir` names another folder
    <workdir>/vocab/   the SentencePiece model trained for the run, unless `data.vocab_path` names one

`workdir` (and `data.data_dir`, `data.vocab_path`) may be a local folder or any `etils.epath` path (gs://...).
"""

from __future__ import annotations

import json
import os

import jax
from absl import logging
from etils import epath

from jformer import paths
from jformer.data import mixture as mixture_lib
from jformer.data import pretrained_vocab
from jformer.data.checks import check_size, check_vocab
from jformer.data.documents import DocumentSource
from jformer.data.pretrained_vocab import PretrainedTokenizer
from jformer.data.sources import load_split, synthetic_entry, training_texts
from jformer.data.synthetic.dataset import TaskVocabulary
from jformer.data.tokenizer import Tokenizer, get_tokenizer

# The vocabulary's checksum, recorded in the workdir when a run first uses it and checked at every later use
# (resume, translate, evaluate, generate): a changed vocabulary would tokenize differently from the parameters.
VOCAB_CHECKSUM = "vocab_checksum.json"


def source_args(config, workdir: epath.PathLike) -> dict:
  """The keyword arguments of `load_split` / `make_datasets` that say where `config.data`'s dataset is read."""
  return dict(path=config.data.path, data_dir=config.data.data_dir or os.fspath(epath.Path(workdir) / "tfds"),
              source_lang=config.data.source_lang, target_lang=config.data.target_lang)


def train_splits(config, workdir: epath.PathLike) -> list:
  """The train splits the run reads (building their tfds files the first time): `data.dataset`'s, or each
  `data.mixture` source's, where one that holds no documents is refused in one line (`mixture.refusal`)."""
  args = source_args(config, workdir)
  mixture = mixture_lib.sources_of(config)
  if not mixture:
    return [load_split(config.data.dataset, "train", **args)]
  splits = []
  for source in mixture:
    split = load_split(source.dataset, "train", **{**args, "path": source.path})
    if not isinstance(split, DocumentSource):
      raise ValueError(mixture_lib.refusal(source, "translation pairs (another task)"))
    splits.append(split)
  return splits


def vocab_path(config, workdir: epath.PathLike) -> epath.Path:
  """Where the run's vocabulary is: `data.vocab_path`, else the pretrained one `jformer import-hf` wrote
  (`<workdir>/vocab/pretrained_vocab.json`) if there is one, else `<workdir>/vocab/spm_<vocab_size>.model`."""
  if config.data.vocab_path:
    return epath.Path(config.data.vocab_path)
  pretrained = epath.Path(workdir) / "vocab" / pretrained_vocab.FILE_NAME
  return pretrained if pretrained.exists() else epath.Path(workdir) / "vocab" / f"spm_{config.model.vocab_size}.model"


def load_tokenizer(config, workdir: epath.PathLike) -> Tokenizer | PretrainedTokenizer | TaskVocabulary:
  """The run's vocabulary: `data.vocab_path` (which must exist), a pretrained model's (`vocab_path`), or a
  SentencePiece model trained once into `<workdir>/vocab/` on the training split (`sources.training_texts`: both
  sides of the pairs, or the documents' lines; every source's, for a `data.mixture`) and reused.
  A language model's vocabulary is lossless (`train_tokenizer`), so that its bits per byte count every byte.
  A synthetic task's vocabulary is its own token ids (`TaskVocabulary`): nothing is trained, read or written.

  The vocabulary's size and sha256 are recorded in `<workdir>/vocab/vocab_checksum.json` when the run first uses it
  (process 0) and checked before every later load; with them what a trained one was trained on (`vocab_source`):
  one trained by a start that saved no checkpoint, on other data, is trained again (the run's identity is recorded
  only with its first checkpoint, `jformer.config.write_run`).

  Raises:
    ValueError: the vocabulary differs from the one the run recorded (one line naming the file and the fix).
  """
  synthetic = synthetic_entry(config.data.dataset)
  if synthetic is not None:
    return synthetic.vocabulary(config.data.dataset_options)
  path = vocab_path(config, workdir)
  record = epath.Path(workdir) / "vocab" / VOCAB_CHECKSUM
  source = vocab_source(config)
  started = (epath.Path(workdir) / "config.json").exists()  # a run that saved a checkpoint (its identity recorded).
  if not config.data.vocab_path and not started and _recorded(record).get("source", source) != source:
    # Trained by an earlier start of this workdir that saved nothing, on other data: trained again.
    logging.warning("%s was trained on other data (%s) by a start that trained no step; training it again for %s.",
                    os.fspath(path), _recorded(record)["source"], source)
    path.unlink(missing_ok=True)
    record.unlink(missing_ok=True)
  problem = paths.checksum_problem(path, record)
  if problem:
    raise ValueError(f"the run's vocabulary {problem}: the parameters were trained on the recorded one, so restore "
                     "that file (or train in a new --workdir)")
  if config.data.vocab_path:
    check_vocab(config.data.vocab_path, config.model.vocab_size)
  if pretrained_vocab.is_pretrained_vocabulary(path):  # `jformer import-hf`'s: nothing to train.
    tokenizer = pretrained_vocab.PretrainedTokenizer.from_file(path)
    check_size(tokenizer, path, config.model.vocab_size, "the vocabulary")
  else:
    tokenizer = get_tokenizer(
        path, lambda: (text for split in train_splits(config, workdir) for text in training_texts(split)),
        vocab_size=config.model.vocab_size, max_sentences=config.data.spm_max_sentences,
        lossless=source["lossless"])
  if not record.exists() and jax.process_index() == 0:
    paths.record_checksum(path, record, source=source)
  return tokenizer


def vocab_source(config) -> dict:
  """What a vocabulary trained for the run depends on (recorded beside its checksum): the dataset, where it is
  read, the languages, the sample size, whether it is lossless (a language model's) and a `data.mixture`'s sources."""
  data = config.data
  return dict(dataset=data.dataset, path=data.path,
              source_lang=data.source_lang, target_lang=data.target_lang, spm_max_sentences=data.spm_max_sentences,
              lossless=config.model.architecture == "lm",
              mixture=[[source.dataset, source.path] for source in mixture_lib.sources_of(config)])


def _recorded(record: epath.Path) -> dict:
  """The vocabulary's checksum record, {} when there is none."""
  return json.loads(record.read_text()) if record.exists() else {}
