"""Validation of a whole config: every value against its declaration (`jformer.schema.check_value`), the model
section by the model's config, then the rules that tie fields of several sections together."""

from __future__ import annotations

import ml_collections

from jformer import data, runtime, tasks
from jformer.config.recipe import parse_rules
from jformer.config.schema import declared
from jformer.data import mixture_problems
from jformer.decode.search import check_options
from jformer.models import surgery
from jformer.models.config import TransformerConfig
from jformer.schema import check_value
from jformer.tasks.metrics import NO_KEPT_METRIC


# `validate(config, backend=THIS_MACHINE)`: the backend JAX will start on this machine (`runtime.expected_backend`,
# decided without starting it).
THIS_MACHINE = "this machine"


def validate(config: ml_collections.ConfigDict, backend: str | None = THIS_MACHINE) -> TransformerConfig:
  """Fails with one ValueError naming every problem (values, combinations that cannot run, attention kernels that
  cannot run the model's calls on `backend`: `TransformerConfig.kernel_refusal`, a flex variant's mod that would
  fail or train on NaN or constants: `TransformerConfig.mod_problem`); returns the model's frozen config, its
  registry names resolved.

  `backend`: the JAX backend the config will run on ('cpu', 'gpu', 'tpu'), THIS_MACHINE (the default), or None
  when it is not known (a sweep submitted to a cluster, a command that runs no model).
  """
  problems = []
  for key, field in declared():
    if not field.spec.group:
      section, _, name = key.rpartition(".")
      value = config[section][name] if section else config[name]
      reason = check_value(key, field, value)
      if reason:
        problems.append(reason)
  if problems:  # the checks below read these values.
    raise ValueError("invalid config: " + "; ".join(problems))
  model = TransformerConfig.from_config(config.model)
  refusal = model.kernel_refusal(encoder_decoder=tasks.get(config.model.architecture).pairs,
                                 backend=runtime.expected_backend() if backend == THIS_MACHINE else backend)
  if refusal:  # the variant cannot run here at all: its fix first and alone, not what else it would not support.
    raise ValueError("invalid config: " + refusal)
  mistake = model.mod_problem(encoder_decoder=tasks.get(config.model.architecture).pairs)
  if mistake:  # a flex variant's own function: named with its file and line, alone.
    raise ValueError(mistake)
  problems = _combinations(config, model) + _sequence_problems(config, model)
  if problems:
    raise ValueError("invalid config: " + "; ".join(problems))
  return model


def _combinations(config: ml_collections.ConfigDict, built: TransformerConfig) -> list[str]:
  """The rules that tie fields of several sections together, each a sentence naming the keys and the fix (`built`:
  the model config validated from `config.model`, built once)."""
  problems = []
  data, train, model = config.data, config.train, config.model
  task = tasks.get(model.architecture)
  if data.batch_tokens and data.packing:
    problems.append(f"data.batch_tokens={data.batch_tokens} and data.packing=True both decide how training rows are "
                    "filled; set data.packing=False to batch by token budget, or data.batch_tokens=0 to pack")
  if data.batch_tokens and not task.pairs:
    problems.append(f"data.batch_tokens={data.batch_tokens} is for translation pairs; model.architecture="
                    f"'{model.architecture}' rows are always full (data.batch_size x data.max_length tokens), so set "
                    "data.batch_tokens=0")
  if data.subword_sampling and (data.batch_tokens or not task.pairs):
    problems.append(f"data.subword_sampling={data.subword_sampling} segments translation pairs anew as they are "
                    "read, packed or padded into rows: it needs model.architecture='transformer' and "
                    "data.batch_tokens=0 (or set data.subword_sampling=0)")
  if data.max_length > model.max_length:
    problems.append(f"data.max_length={data.max_length} exceeds model.max_length={model.max_length}; give "
                    f"data.max_length={model.max_length} or less")
  bad_lengths = [length for length in train.eval_lengths
                 if not isinstance(length, int) or not 2 <= length <= model.max_length]
  if bad_lengths:
    problems.append(f"train.eval_lengths={tuple(train.eval_lengths)}: {bad_lengths} not whole numbers from 2 "
                    f"to model.max_length={model.max_length}; give e.g. train.eval_lengths=(256, 512)")
  profile = tuple(train.profile_steps)
  if profile and not (len(profile) == 2 and all(isinstance(x, int) for x in profile)
                      and 1 <= profile[0] <= profile[1]):
    problems.append(f"train.profile_steps={profile} is not two steps (a, b) with 1 <= a <= b; give e.g. "
                    "train.profile_steps=(10, 12), or () for no profile")
  transfer = surgery.transfer_problem(built, train.attention_transfer)
  if transfer:
    problems.append(transfer)
  if not model.predicts_padding and train.label_smoothing > 0:
    problems.append(f"train.label_smoothing={train.label_smoothing} spreads target mass onto the padding id, whose "
                    "logit model.predicts_padding=False masks out: set train.label_smoothing=0")
  if data.batch_size % train.grad_accumulation_steps:
    problems.append(f"data.batch_size={data.batch_size} is not divisible by "
                    f"train.grad_accumulation_steps={train.grad_accumulation_steps}")
  if train.average_checkpoints > train.keep_checkpoints and not train.average_span:
    problems.append(f"train.average_checkpoints={train.average_checkpoints} needs train.keep_checkpoints "
                    f">= it (now {train.keep_checkpoints}), or train.average_span > 0 (the run keeps them)")
  if train.average_span and not (train.average_span < 1 and train.average_checkpoints >= 2):
    problems.append(f"train.average_span={train.average_span} needs a fraction below 1 and "
                    f"train.average_checkpoints >= 2 (now {train.average_checkpoints})")
  problems += _kept_problems(config, task, built)
  if config.optimizer.cooldown_fraction > 0.5:
    problems.append(f"optimizer.cooldown_fraction={config.optimizer.cooldown_fraction} is not in [0, 0.5]: the "
                    "cool-down must start after a time budget's planning steps (0 = off)")
  problems += _dataset_problems(config)
  problems += mixture_problems(config)
  try:
    parse_rules(train.recipe, [key for key, _ in declared()])
  except ValueError as e:
    problems.append(str(e))
  try:
    check_options(config.decode.method, config.decode, prefix="decode.")
  except ValueError as e:
    problems.append(str(e))
  if train.budget_minutes and train.bleu_every:
    problems.append(f"train.bleu_every={train.bleu_every} decodes during training, which a time budget cannot "
                    f"plan for (train.budget_minutes={train.budget_minutes:g}); set train.bleu_every=0")
  return problems


def _sequence_problems(config: ml_collections.ConfigDict, model: TransformerConfig) -> list[str]:
  """`parallel.sequence` > 1 (each row's tokens split over that many devices) against the mode, the row length and
  what attention over a split row cannot take (`jformer.attention.context_parallel`)."""
  parallel = config.parallel
  if parallel.sequence <= 1:
    return []
  split = f"parallel.sequence={parallel.sequence} splits each row's tokens"
  if parallel.mode != "mesh":
    return [f"{split} over the device mesh, which parallel.mode='{parallel.mode}' does not use; set "
            "parallel.mode='mesh' or parallel.sequence=1"]
  problems = []
  lengths = [("data.max_length", config.data.max_length)] + [("train.eval_lengths", n) for n in
                                                              config.train.eval_lengths]
  problems += [f"{split}: {key}={n} is not a multiple of it" for key, n in lengths if n % parallel.sequence]
  needs = {reason for layer in model.layer_configs() for feature, reason in layer.needs().items()
           if feature in ("bias", "dropout")}
  if needs:
    problems.append(f"{split}, which attention cannot take with {', '.join(sorted(needs))}; use rotary or embedding "
                    "positions and no attention dropout, or parallel.sequence=1")
  whole_row = sorted({layer.attention for layer in model.layer_configs()
                      if layer.attention_variant.captures or layer.attention_variant.reads_positions})
  if whole_row:
    problems.append(f"{split}, and attention {whole_row} reads captured tensors or absolute positions that a share "
                    "of the row does not hold; use another variant for those layers, or parallel.sequence=1")
  return problems


def _kept_problems(config: ml_collections.ConfigDict, task, built: TransformerConfig) -> list[str]:
  """`train.keep_best` against the task's kept metrics, decoding and checkpoint averaging; `train.patience` without
  a kept metric."""
  train, problems = config.train, []
  if train.keep_best == NO_KEPT_METRIC:
    if train.patience:
      problems.append(f"train.patience={train.patience} counts evaluations without a gain in train.keep_best's "
                      "metric, which is 'none'; set train.keep_best (e.g. 'valid_loss') or train.patience=0")
    return problems
  if train.keep_best not in task.task.kept_metrics:
    problems.append(f"train.keep_best='{train.keep_best}' is not a metric of model.architecture="
                    f"'{config.model.architecture}'; it keeps {', '.join(task.task.kept_metrics)} (or 'none')")
  elif train.keep_best == "valid_bleu" and (refusal := built.attention_refusal(
      decoding=True)):
    problems.append(f"train.keep_best='valid_bleu' decodes at every evaluation, but {refusal}; keep 'valid_loss'")
  if train.average_checkpoints:
    problems.append(f"train.keep_best='{train.keep_best}' and train.average_checkpoints="
                    f"{train.average_checkpoints} both choose the parameters the final test uses; set "
                    "train.keep_best='none' or train.average_checkpoints=0")
  return problems


def _dataset_problems(config: ml_collections.ConfigDict) -> list[str]:
  """`data.dataset_options` against the dataset's options; a synthetic task's sizes against model.vocab_size,
  data.max_length and model.architecture (its rows have the task's length and token ids, and only the synthetic
  task reads them)."""
  options = dict(config.data.dataset_options)
  try:
    data.check_dataset_options(config.data.dataset, options)
    synthetic = data.synthetic_entry(config.data.dataset)
    sizes = synthetic.sizes(options) if synthetic else None
  except ValueError as e:
    return [str(e)]
  architecture, model = config.model.architecture, config.model
  if sizes is None and architecture == "synthetic":
    return [f"model.architecture='synthetic' trains on a synthetic task, not data.dataset='{config.data.dataset}'; "
            "set data.dataset to 'mqar', 'induction', 'selective_copy' or 'listops'"]
  if sizes is None:
    return []
  problems = []
  if architecture != "synthetic":
    problems.append(f"data.dataset='{config.data.dataset}' is a synthetic task; set model.architecture='synthetic'")
  if model.vocab_size != sizes.vocab_size:
    problems.append(f"model.vocab_size={model.vocab_size} but data.dataset='{config.data.dataset}' has "
                    f"{sizes.vocab_size} token ids; set --config.model.vocab_size={sizes.vocab_size}")
  if config.data.max_length != sizes.seq_len:
    problems.append(f"data.max_length={config.data.max_length} but data.dataset='{config.data.dataset}' rows have "
                    f"{sizes.seq_len} tokens; set --config.data.max_length={sizes.seq_len}")
  return problems
