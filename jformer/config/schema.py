"""Every field an experiment can set, declared once (`jformer.schema.field`): the model section is the model's own
frozen config (`jformer.models.TransformerConfig`), the other sections are declared here. The allowed values are
the ones their readers hold (the data pipeline's, the decoders', the parallel modes, the registries), not retyped.

`base_config()` is the default config every config file starts from; `declared()` lists every field with its
dotted key, which validation, the run's identity and the reference page (docs/config.md) read.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import ml_collections

from jformer import axes, data, parallel
from jformer.decode.search import METHODS
from jformer.tasks.metrics import KEPT_METRICS, NO_KEPT_METRIC
from jformer.models.config import TransformerConfig
from jformer.schema import Field, Registered, Spec, field, fields


@dataclasses.dataclass(frozen=True)
class DataSection:
  """`config.data`: the corpus, the vocabulary and how training rows are made."""
  dataset: str = field("parallel_text", "Dataset name from the registry (`jformer list dataset`).",
                       choices=Registered("dataset"), identity=True)
  dataset_options: tuple = field((), "Options of that dataset (a synthetic task's, e.g. seq_len, num_kv_pairs; "
                                 "`jformer list dataset`); most datasets take none.", group=True, identity=True)
  mixture: tuple = field((), "LM: several document datasets mixed by weight instead of data.dataset and data.path: "
                        "{name: {'dataset': 'text', 'path': 'corpora/web', 'weight': 3.0}, ...}; per-source tokens "
                        "and valid bits per byte logged (jformer/data/mixture.py).", group=True, identity=True)
  path: str = field("", "parallel_text: folder of {train,valid,test}.{src,tgt}; text: folder of "
                    "{train,valid,test}.txt, documents separated by blank lines; '' = the bundled corpus.",
                    identity=True)
  data_dir: str = field("", "tfds data dir (prepared ArrayRecord files); '' = <workdir>/tfds.")
  source_lang: str = field("en", "Source language (wmt datasets); translation direction source -> target.",
                           identity=True)
  target_lang: str = field("de", "Target language.", identity=True)
  vocab_path: str = field("", "SentencePiece model to use; '' = train one into <workdir>/vocab/ (reused on resume).",
                          identity=True)
  spm_max_sentences: int = field(1_000_000, "Sentences sampled to train the SentencePiece model.", at_least=1,
                                 identity=True)
  max_length: int = field(64, "Tokens per training row (and per example side); eval/test sources are truncated.",
                          at_least=2, identity=True)
  long_examples: str = field("drop", "Training pairs longer than max_length: 'drop' or 'truncate' (counted, logged).",
                             choices=data.LONG_EXAMPLES, identity=True)
  packing: bool = field(True, "Pack several pairs per row (segment ids + positions) instead of padding.",
                        identity=True)
  pack: str = field("documents", "LM rows: 'documents' = documents (cut at max_length) packed with segment ids, no "
                    "attention across documents; 'stream' = all documents + EOS concatenated into contiguous rows.",
                    choices=data.PACKS, identity=True)
  batch_size: int = field(64, "Rows per training step, summed over all devices and hosts.", at_least=1,
                          identity=True)
  batch_tokens: int = field(0, "> 0: steps of up to this many real source and target tokens each, rows of similar "
                            "lengths bucketed into a few shapes (needs packing=False); 0 = batch_size rows.",
                            at_least=0, identity=True)
  subword_sampling: float = field(0.0, "> 0: subword regularisation (Kudo 2018): each training pair is segmented "
                                  "anew every time it is read, drawn from its data.subword_nbest best SentencePiece "
                                  "segmentations with probability ~ P^alpha, alpha = this (Kudo: 0.1); evaluation "
                                  "never samples; 0 = off. Translation with packing or padding (not batch_tokens).",
                                  at_least=0, identity=True)
  subword_nbest: int = field(64, "Segmentations subword sampling draws from (Kudo's l-best: 64).", at_least=2,
                             identity=True)
  eval_batch_size: int = field(64, "Rows per eval batch, summed over all devices and hosts.", at_least=1)
  seed: int = field(0, "Shuffle seed (the data order is part of the checkpoint).", identity=True)


@dataclasses.dataclass(frozen=True)
class OptimizerSection:
  """`config.optimizer`: Adam and the learning-rate schedule of the paper (Sec. 5.3)."""
  learning_rate_scale: float = field(1.0, "lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (eq. 3).",
                                     at_least=0)
  warmup_steps: int = field(4000, "Warm-up steps of eq. 3 (paper: 4000).", at_least=1)
  cooldown_fraction: float = field(0.0, "Last fraction of the run's steps over which the learning rate ramps "
                                   "linearly to 0 (Zhai et al. 2022); 0 = off (paper); at most 0.5.", at_least=0)
  b1: float = field(0.9, "Adam beta1 (paper: 0.9).", at_least=0)
  b2: float = field(0.98, "Adam beta2 (paper: 0.98).", at_least=0)
  eps: float = field(1e-9, "Adam epsilon (paper: 1e-9).", at_least=0)
  weight_decay: float = field(0.0, "Decoupled weight decay (AdamW); the paper uses none.", at_least=0)
  grad_clip_norm: float = field(0.0, "Clip gradients to this global norm; 0 = off (paper: off).", at_least=0)


@dataclasses.dataclass(frozen=True)
class TrainSection:
  """`config.train`: steps, seeds, evaluation and checkpoint intervals."""
  steps: int = field(100_000, "Training steps (paper base: 100k, big: 300k).", at_least=1)
  budget_minutes: float = field(0.0, "Train for this many minutes of wall clock instead (0 = off): the steps are "
                                "planned from the measured step time and replace steps (kept in "
                                "<workdir>/budget.json for resume); jformer/train/budget.py.", at_least=0)
  seed: int = field(0, "Parameter init and dropout seed.")
  recipe: tuple = field((), "Rules that choose config keys from the corpus size and the steps the budget buys, "
                        "applied when a run starts (a key given on the command line keeps its value): "
                        "((key, input, ((bound, value), ..., (None, value))), ...); jformer/config/recipe.py, "
                        "configs/own_corpus.py.")
  label_smoothing: float = field(0.1, "Label smoothing (paper: eps_ls = 0.1).", at_least=0)
  grad_accumulation_steps: int = field(1, "Split each batch into this many micro-batches (one update per step).",
                                       at_least=1)
  log_every: int = field(100, "Steps between progress lines / TensorBoard train scalars.", at_least=1)
  eval_every: int = field(1000, "Steps between eval loss/accuracy on the valid split.", at_least=1)
  checkpoint_every: int = field(1000, "Steps between checkpoints (one is always written at the end and on SIGTERM).",
                                at_least=1)
  keep_checkpoints: int = field(5, "Checkpoints kept (>= average_checkpoints without average_span).",
                                at_least=1)
  bleu_every: int = field(0, "Steps between test-split BLEU; 0 = only at the end.", at_least=0)
  bleu_examples: int = field(-1, "Test sentences decoded for BLEU; -1 = all.", at_least=-1)
  average_checkpoints: int = field(0, "Average N checkpoints at the end (paper: 5 base, 20 big); the final test uses "
                                   "the mean where its valid loss is no higher than the last step's.", at_least=0)
  average_span: float = field(0.0, "Save the N averaged checkpoints evenly over this last fraction of the steps "
                              "(0 = the last N saved every checkpoint_every).", at_least=0)
  keep_best: str = field(NO_KEPT_METRIC, "Keep the checkpoint of the best value of this valid metric, scored at "
                         "every evaluation, beside the latest (never deleted); the final test, translate, evaluate and "
                         "generate use it ('none' = the last step); jformer/train/selection.py.",
                         choices=(NO_KEPT_METRIC, *KEPT_METRICS))
  valid_bleu_examples: int = field(200, "keep_best='valid_bleu': valid sentences decoded (as the test is) at each "
                                   "evaluation, evenly spaced over the split, the same each time.", at_least=1)
  patience: int = field(0, "End the run after this many evaluations without a gain in train.keep_best's metric; "
                        "0 = off.", at_least=0)
  eval_lengths: tuple = field((), "LM: context lengths (tokens) of the final test bits per byte; () = "
                              "data.max_length.")
  profile_steps: tuple = field((), "(a, b): write a jax.profiler trace of steps a to b into "
                               "<workdir>/tensorboard/plugins/profile (TensorBoard's profile plugin); () = off.")
  skip_nonfinite_updates: int = field(0, "Non-finite (NaN/Inf) updates skipped before the run stops; 0 = stop at "
                                      "the first.", at_least=0)
  initialize_from: str = field("", "A run's workdir (trained, or written by `jformer import-hf`) whose parameters "
                               "start this one: each of this model's parameters at the same path and shape is "
                               "copied (e.g. all but a new attention variant's own after model.layer_pattern "
                               "changes some layers' attention); read when the run starts, with its vocabulary "
                               "(data.vocab_path must be that run's); '' = a fresh start.")
  attention_transfer: int = field(0, "Steps of attention transfer (LoLCATs) at the start: only the parameters of "
                                  "the layers whose kind replaces the model's attention that the new variant owns "
                                  "train, to reproduce the model's own attention output per layer (mean squared "
                                  "error, the teacher computed in the same step from the same input); then the "
                                  "ordinary loss (train.trainable); 0 = off.", at_least=0, identity=True)
  trainable: str = field("", "A regular expression of the parameter paths trained (after any attention transfer), "
                         "e.g. '.*self_attention.*' fine-tunes attention only; '' = all.", identity=True)


@dataclasses.dataclass(frozen=True)
class ParallelSection:
  """`config.parallel`: the device mesh or pmap, and how a multi-host job finds its processes."""
  mode: str = field("mesh", "'mesh': jax.jit over a device mesh; 'pmap': classic data parallel (jax.pmap).",
                    choices=parallel.MODES)
  data: int = field(-1, "Mesh axis sizes (mesh mode); -1 = the remaining devices. Batch: data x fsdp.", at_least=-1)
  fsdp: int = field(1, "Shards parameters and optimizer state (and the batch) over this axis.", at_least=-1)
  tensor: int = field(1, "Megatron-style: attention heads and feed-forward units split over this axis.", at_least=-1)
  sequence: int = field(1, "Context parallelism: each row's tokens split over this axis (rows a multiple of it "
                        "long; of 2 x it for the load-balanced causal order).", at_least=-1)
  context_strategy: str = field("gather", "Attention over a split sequence: 'gather' (each device's queries against "
                                "all keys/values, gathered) or 'ring' (key/value blocks passed around the axis).",
                                choices=axes.CONTEXT_STRATEGIES)
  coordinator_address: str = field("", "Multi-host: host:port of process 0 ('' = env or auto-detect).")
  num_processes: int = field(0, "Multi-host: number of processes (0 = env or auto-detect).", at_least=0)
  process_id: int = field(-1, "Multi-host: this process's index (-1 = env or auto-detect).", at_least=-1)


@dataclasses.dataclass(frozen=True)
class DecodeSection:
  """`config.decode`: how BLEU, `translate` and `generate` decode."""
  method: str = field("beam", "'beam' (paper), 'greedy' or 'sample'.", choices=METHODS)
  beam_size: int = field(4, "Beam width (paper: 4).", at_least=1)
  alpha: float = field(0.6, "Length penalty ((5 + len) / 6)^alpha (paper: 0.6).", at_least=0)
  max_extra_length: int = field(50, "Output length limit = source length + this (paper: 50).", at_least=1)
  batch_size: int = field(32, "Sentences decoded together, split across all devices (rounded up to a multiple of "
                          "them).", at_least=1)
  # Ranges the schema's at_least cannot state (> 0, (0, 1]) are checked by jformer.decode.search.check_options.
  temperature: float = field(1.0, "Sampling only: softmax temperature (> 0).")
  top_k: int = field(0, "Sampling only; 0 = off.", at_least=0)
  top_p: float = field(1.0, "Sampling only: nucleus mass in (0, 1]; 1 = off.")


# Section name -> its declaration, in the order of config.json.
SECTIONS = {"model": TransformerConfig, "data": DataSection, "optimizer": OptimizerSection, "train": TrainSection,
            "parallel": ParallelSection, "decode": DecodeSection}
IMPORTS = Field("imports", str, "", Spec(
    "Plug-ins imported before anything is built, comma-separated: files (path/to/my_variants.py) or modules "
    "(my_package.attention); their @register lines add attention variants, encodings, datasets or tasks."))


def declared() -> Iterator[tuple[str, Field]]:
  """(dotted key, field) of every declared field, in config.json order."""
  yield "imports", IMPORTS
  for section, declaration in SECTIONS.items():
    for f in fields(declaration):
      yield f"{section}.{f.name}", f


def base_config() -> ml_collections.ConfigDict:
  """Every field an experiment can set, with its default; config files start from this."""
  config = ml_collections.ConfigDict()
  config.imports = IMPORTS.default
  for section, declaration in SECTIONS.items():
    config[section] = ml_collections.ConfigDict()
    for f in fields(declaration):
      config[section][f.name] = ml_collections.ConfigDict() if f.spec.group else f.default
  return config


def groups() -> tuple[str, ...]:
  """Dotted keys of the option groups, whose keys the chosen plug-in defines."""
  return tuple(key for key, f in declared() if f.spec.group)
