"""Experiment configs: `configs/*.py` files with `get_config()`, dotted overrides, validation.

`load(path, overrides)` is the one way configs are read (the CLI, tests and config files that build on
other config files all use it). Configs are locked ConfigDicts: an unknown key, set by a config file or an
override, is an error that names the nearest known key, and invalid combinations fail here, before anything runs.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import json
import pathlib
from typing import Any, Mapping

import ml_collections
from etils import epath

# Groups whose keys are not fixed in advance (the chosen variant validates them).
OPEN_GROUPS = ("model.attention_options", "model.positional_options")

# Dotted keys (or prefixes ending in '.') a run cannot change once trained: its parameters were made for the model,
# its vocabulary for the tokenizer settings, and its checkpoints hold a position in the data (dataset, corpus,
# languages, row length, packing, batch and shuffle seed). Resuming or loading a run with another value is refused
# (`check_same_run`); every other key (steps, intervals, optimizer, eval, decode, parallel, logging) may change.
RUN_KEYS = ("model.", "data.dataset", "data.path", "data.source_lang", "data.target_lang", "data.vocab_path",
            "data.spm_max_sentences", "data.max_length", "data.long_examples", "data.packing", "data.batch_size",
            "data.seed", "data.pack", "data.batch_tokens")
# Keys under RUN_KEYS that change neither the parameters nor the data: they may change on resume.
RUN_KEYS_EXCEPT = ("model.dropout_rate", "model.attention_dropout_rate", "model.remat", "model.dtype")


def base_config() -> ml_collections.ConfigDict:
  """Every field an experiment can set, with its default; config files start from this."""
  config = ml_collections.ConfigDict()
  # Plug-ins imported before anything is built, comma-separated: files (path/to/my_variants.py) or modules
  # (my_package.attention): their @register lines add attention variants, positional encodings or datasets.
  config.imports = ""

  config.model = model = ml_collections.ConfigDict()
  model.architecture = "transformer"  # 'transformer' (encoder-decoder) or 'lm' (decoder-only).
  model.vocab_size = 32000  # Shared source/target vocabulary size (SentencePiece).
  model.d_model = 512  # Width of embeddings and residual stream (paper: d_model).
  model.num_heads = 8  # Attention heads (paper: h); d_k = d_v = d_model / num_heads.
  model.num_kv_heads = 0  # Key/value heads (grouped-query attention; 1 = multi-query); 0 = num_heads (paper).
  model.d_ff = 2048  # Inner width of the feed-forward sublayer (paper: d_ff).
  model.num_encoder_layers = 6  # Encoder layers (paper: N).
  model.num_decoder_layers = 6  # Decoder layers (paper: N).
  model.dropout_rate = 0.1  # Dropout on sublayer outputs and embedding sums (paper: P_drop).
  model.attention_dropout_rate = 0.0  # Dropout on attention weights (not in the paper).
  model.attention = "auto"  # Attention variant, a name from `jformer attention list`; auto: chosen per backend/shape.
  model.attention_options = ml_collections.ConfigDict()  # Keyword options of that variant.
  model.positional = "sinusoidal"  # Positional encoding, a name from `jformer positional list`; paper: sinusoidal.
  model.positional_options = ml_collections.ConfigDict()  # Keyword options of that encoding (e.g. num_buckets).
  model.max_length = 512  # Longest sequence the position table covers.
  model.norm = "post"  # 'post': LayerNorm(x + Sublayer(x)) as the paper; 'pre': x + Sublayer(LayerNorm(x)).
  model.activation = "relu"  # Feed-forward nonlinearity: 'relu' (paper) or 'gelu'.
  model.remat = "auto"  # Recompute layer activations in the backward pass: auto (>= 1024 tokens), none, full.
  model.share_embeddings = True  # One embedding matrix for source and target tokens (paper Sec. 3.4).
  model.tie_output_embedding = True  # Pre-softmax projection = target embedding transposed (paper Sec. 3.4).
  # Compute dtype of the matmuls and activations: 'float32', 'bfloat16' (products accumulate in float32; parameters
  # and optimizer state stay float32) or 'auto': bfloat16 on GPU/TPU and on CPUs with AVX512_BF16/AMX, else float32.
  model.dtype = "float32"

  config.data = data = ml_collections.ConfigDict()
  data.dataset = "parallel_text"  # Dataset name from the registry (`jformer.data.available_datasets()`).
  data.path = ""  # parallel_text: folder of {train,valid,test}.{src,tgt}; "" = the bundled gettext en-de corpus.
  # text: folder of {train,valid,test}.txt, documents separated by blank lines; "" = the bundled English text.
  data.data_dir = ""  # tfds data dir (prepared ArrayRecord files); "" = <workdir>/tfds.
  data.source_lang = "en"  # Source language (wmt datasets); translation direction source -> target.
  data.target_lang = "de"  # Target language.
  data.vocab_path = ""  # SentencePiece model to use; "" = train one into <workdir>/vocab/ (reused on resume).
  data.spm_max_sentences = 1_000_000  # Sentences sampled to train the SentencePiece model.
  data.max_length = 64  # Tokens per training row (and per example side); eval/test sources are truncated.
  data.long_examples = "drop"  # Training pairs longer than max_length: 'drop' or 'truncate' (counted, logged).
  data.packing = True  # Pack several pairs per row (segment ids + positions) instead of padding.
  # LM rows (model.architecture="lm"): "documents" = documents (cut at max_length) packed with segment ids, no
  # attention across documents; "stream" = all documents + EOS concatenated and cut into contiguous rows.
  data.pack = "documents"
  data.batch_size = 64  # Rows per training step, summed over all devices and hosts.
  # > 0: training steps of up to this many real source and target tokens each (all devices and hosts), rows of
  # similar lengths bucketed into a few shapes (jformer.data.buckets; needs data.packing=False); 0 = batch_size.
  data.batch_tokens = 0
  data.eval_batch_size = 64  # Rows per eval batch, summed over all devices and hosts.
  data.seed = 0  # Shuffle seed (the data order is part of the checkpoint).

  config.optimizer = optimizer = ml_collections.ConfigDict()
  optimizer.learning_rate_scale = 1.0  # lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (eq. 3).
  optimizer.warmup_steps = 4000  # Paper: 4000.
  # Last fraction of the run's steps (train.steps, or a time budget's plan) over which the learning rate ramps
  # linearly down to 0 (rsqrt + cool-down, Zhai et al. 2022); 0 = off (paper). At most 0.5.
  optimizer.cooldown_fraction = 0.0
  optimizer.b1 = 0.9  # Adam beta1 (paper: 0.9).
  optimizer.b2 = 0.98  # Adam beta2 (paper: 0.98).
  optimizer.eps = 1e-9  # Adam epsilon (paper: 1e-9).
  optimizer.weight_decay = 0.0  # Decoupled weight decay (AdamW); the paper uses none.
  optimizer.grad_clip_norm = 0.0  # Clip gradients to this global norm; 0 = off (paper: off).

  config.train = train = ml_collections.ConfigDict()
  train.steps = 100_000  # Training steps (paper base: 100k, big: 300k).
  # Train for this many minutes of wall clock instead (0 = off): the steps are planned from the step time measured
  # after compilation and replace train.steps (logged, kept in <workdir>/budget.json for resume). Counted: steps,
  # periodic evals, checkpoint saves; not: compilation, the final test (BLEU / bits per byte). jformer/train/budget.py
  train.budget_minutes = 0.0
  train.seed = 0  # Parameter init and dropout seed.
  train.label_smoothing = 0.1  # Paper: eps_ls = 0.1.
  train.grad_accumulation_steps = 1  # Split each batch into this many micro-batches (one update per step).
  train.log_every = 100  # Steps between progress lines / TensorBoard train scalars.
  train.eval_every = 1000  # Steps between eval loss/accuracy on the valid split.
  train.checkpoint_every = 1000  # Steps between checkpoints (one is always written at the end and on SIGTERM).
  train.keep_checkpoints = 5  # Checkpoints kept (>= average_checkpoints).
  train.bleu_every = 0  # Steps between test-split BLEU; 0 = only at the end.
  train.bleu_examples = -1  # Test sentences decoded for BLEU; -1 = all.
  train.average_checkpoints = 0  # Final BLEU with the mean of the last N checkpoints (paper: 5 base, 20 big).
  train.eval_lengths = ()  # LM: context lengths (tokens) of the final test bits per byte; () = data.max_length.
  train.skip_nonfinite_updates = 0  # Non-finite (NaN/Inf) updates skipped before the run stops; 0 = stop at the first.

  config.parallel = parallel = ml_collections.ConfigDict()
  parallel.mode = "mesh"  # 'mesh': jax.jit over a device mesh; 'pmap': classic data parallel (jax.pmap).
  parallel.data = -1  # Mesh axis sizes (mesh mode); -1 = the remaining devices. Batch: data x fsdp.
  parallel.fsdp = 1  # Shards parameters and optimizer state (and the batch) over this axis.
  parallel.tensor = 1  # Megatron-style: attention heads and feed-forward units split over this axis.
  parallel.coordinator_address = ""  # Multi-host: host:port of process 0 ("" = env or auto-detect).
  parallel.num_processes = 0  # Multi-host: number of processes (0 = env or auto-detect).
  parallel.process_id = -1  # Multi-host: this process's index (-1 = env or auto-detect).

  config.decode = decode = ml_collections.ConfigDict()
  decode.method = "beam"  # 'beam' (paper), 'greedy' or 'sample'.
  decode.beam_size = 4  # Paper: 4.
  decode.alpha = 0.6  # Length penalty ((5 + len) / 6)^alpha (paper: 0.6).
  decode.max_extra_length = 50  # Output length limit = source length + this (paper: 50).
  decode.batch_size = 32  # Sentences decoded together, split across all devices (rounded up to a multiple of them).
  decode.temperature = 1.0  # Sampling only.
  decode.top_k = 0  # Sampling only; 0 = off.
  decode.top_p = 1.0  # Sampling only; 1 = off.
  return config


def load(path: str | pathlib.Path, overrides: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
  """Reads `path` (a file with `get_config()`), applies dotted `overrides`, validates, returns it locked.

  `path` may end in `:ARG`, passed as `get_config(ARG)`. Override values may be Python values or strings
  as typed on a command line (`"16"`, `"true"`, `"(1, 2)"`); strings are converted to the field's type.
  """
  config = _read(path)
  for dotted_key, value in (overrides or {}).items():
    set_value(config, dotted_key, value)
  import_plugins(config.imports)
  validate(config)
  config.lock()
  return config


# Run keys an evaluation of a trained run may change (`jformer evaluate --config.data.max_length=N`): the context
# length it scores; the parameters work at any length their positional tables cover (model.max_length).
EVAL_KEYS = ("data.max_length",)


def load_run(workdir: epath.PathLike, overrides: Mapping[str, Any] | None = None, *,
             may_change: tuple[str, ...] = ()) -> ml_collections.ConfigDict:
  """The resolved config a training run wrote to `<workdir>/config.json` (local or gs://...), with `overrides` applied.

  The file is read over `base_config()`, so runs written before a field existed get that field's default, and
  fields that have moved since are read where they are now (`_moved_fields`).
  Overrides of the keys that define the run (`RUN_KEYS`) are refused, naming them (`check_same_run`), except those
  in `may_change` (e.g. `EVAL_KEYS`).
  """
  path = epath.Path(workdir) / "config.json"
  if not path.is_file():
    raise FileNotFoundError(f"{path} does not exist: is '{workdir}' the --workdir of a `jformer train` run?")
  written = _moved_fields(_flatten_dict(json.loads(path.read_text())))
  config = _from_values({**written, **(overrides or {})})
  check_same_run(_from_values({**written, **{key: value for key, value in (overrides or {}).items()
                                             if key in may_change}}),
                 config, f"the run in {workdir}", "drop those --config overrides")
  import_plugins(config.imports)
  validate(config)
  config.lock()
  return config


def _from_values(values: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """`base_config()` with `{dotted_key: value}` set."""
  config = base_config()
  for dotted_key, value in values.items():
    set_value(config, dotted_key, value)
  return config


def changed_keys(old: ml_collections.ConfigDict, new: ml_collections.ConfigDict) -> dict[str, tuple[Any, Any]]:
  """`{dotted_key: (old value, new value)}` of the leaves that differ, compared as written to config.json (JSON)."""
  old, new = (_flatten_dict(json.loads(c.to_json_best_effort())) for c in (old, new))
  return {key: (old.get(key), new.get(key)) for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)}


def check_same_run(run: ml_collections.ConfigDict, config: ml_collections.ConfigDict, where: str, fix: str) -> dict:
  """Refuses `config` for the trained `run` if a key that defines the run (`RUN_KEYS`) differs; returns the other
  differing keys (`changed_keys`), which may change.

  Raises:
    ValueError: naming every differing run key with both values, where the run is, and `fix`.
  """
  changed = changed_keys(run, config)
  defining = [key for key in changed if key.startswith(RUN_KEYS) and not key.startswith(RUN_KEYS_EXCEPT)]
  if defining:
    differ = "; ".join(f"{key}={changed[key][1]!r} (the run has {changed[key][0]!r})" for key in defining)
    raise ValueError(f"{where} was trained with other values of keys that define its parameters, vocabulary or "
                     f"data: {differ}; {fix}")
  return changed


_IMPORTED_PLUGINS: dict[str, Any] = {}


def import_plugins(imports: str) -> list:
  """Imports the plug-ins `config.imports` names (comma-separated files or module names), each once per process,
  so that their `@register` lines run before the model, the data or a sweep point is built.

  Every entry point reads configs through `load`/`load_run`, so every process (hosts of a pod, sweep points,
  `translate` on the run later) imports them. A file path is resolved from the working directory.
  """
  modules = []
  for name in filter(None, (part.strip() for part in imports.split(","))):
    if name.endswith(".py") or "/" in name:
      key = str(pathlib.Path(name).resolve())
      if key not in _IMPORTED_PLUGINS:
        _IMPORTED_PLUGINS[key] = import_file(key, "plugin", "--config.imports=path/to/my_variants.py")
    else:
      key = name
      if key not in _IMPORTED_PLUGINS:
        try:
          _IMPORTED_PLUGINS[key] = importlib.import_module(name)
        except ModuleNotFoundError as e:
          raise ValueError(f"config.imports: no module '{name}' ({e}); give a module on the Python path "
                           "or a file path ending in .py") from None
    modules.append(_IMPORTED_PLUGINS[key])
  return modules


# Fields of runs written before `model.positional_options` -> the option of the 'relative' encoding they set.
RELATIVE_FIELDS = {"model.relative_num_buckets": "num_buckets", "model.relative_max_distance": "max_distance"}


def _moved_fields(values: dict[str, Any]) -> dict[str, Any]:
  """`values` (dotted keys) with the fields of older runs where they live now: a run with model.positional =
  'relative' keeps its bucket settings as `model.positional_options` (those not at their default, so that the
  model config compares equal on resume); other runs never read them."""
  from jformer import positional

  defaults = positional.get("relative").options
  values = dict(values)
  for key, option in RELATIVE_FIELDS.items():
    value = values.pop(key, defaults[option])
    if values.get("model.positional") == "relative" and value != defaults[option]:
      values[f"model.positional_options.{option}"] = value
  return values


def _flatten_dict(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  flat = {}
  for key, value in tree.items():
    if isinstance(value, Mapping) and value:
      flat.update(_flatten_dict(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def set_value(config: ml_collections.ConfigDict, dotted_key: str, value: Any) -> None:
  """Sets `config.<dotted_key>` to `value` (converted to the field's type); unknown keys raise KeyError."""
  *parents, leaf = dotted_key.split(".")
  node = config
  for depth, part in enumerate(parents):
    if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
      raise KeyError(_unknown_key_message(config, ".".join(parents[:depth + 1])))
    node = node[part]
  if leaf not in node:
    if ".".join(parents) not in OPEN_GROUPS:
      raise KeyError(_unknown_key_message(config, dotted_key))
    with node.unlocked():
      node[leaf] = ast.literal_eval(value) if isinstance(value, str) and _is_literal(value) else value
    return
  with node.unlocked():
    node[leaf] = _convert(value, node[leaf], dotted_key)


# Counts, sizes and intervals, with their least value (a run with train.steps=-3 would do nothing and exit 0).
AT_LEAST = {"train.steps": 1, "train.grad_accumulation_steps": 1, "train.log_every": 1, "train.eval_every": 1,
            "train.checkpoint_every": 1, "train.keep_checkpoints": 1, "train.bleu_every": 0,
            "train.skip_nonfinite_updates": 0, "train.average_checkpoints": 0, "train.budget_minutes": 0,
            "data.batch_size": 1, "data.batch_tokens": 0, "data.eval_batch_size": 1, "decode.batch_size": 1,
            "decode.beam_size": 1}


def validate(config: ml_collections.ConfigDict) -> None:
  """Fails with the reason on combinations that cannot run (d_model % heads, unknown variants, ...)."""
  from jformer import models  # Validation of the model section lives with the model.

  models.build(config)
  flat = flatten(config)
  problems = [f"{key}={flat[key]} must be at least {least}" for key, least in AT_LEAST.items() if flat[key] < least]
  if problems:  # the checks below divide by some of these.
    raise ValueError("invalid config: " + "; ".join(problems))
  if config.data.long_examples not in ("drop", "truncate"):
    problems.append(f"data.long_examples='{config.data.long_examples}' is not 'drop' or 'truncate'")
  if config.data.pack not in ("documents", "stream"):
    problems.append(f"data.pack='{config.data.pack}' is not 'documents' or 'stream'")
  if config.data.batch_tokens and config.data.packing:
    problems.append(f"data.batch_tokens={config.data.batch_tokens} and data.packing=True both decide how training "
                    "rows are filled; set data.packing=False to batch by token budget, or data.batch_tokens=0 to pack")
  if config.data.batch_tokens and config.model.architecture == "lm":
    problems.append(f"data.batch_tokens={config.data.batch_tokens} is for translation pairs; language-model rows "
                    "are always full (data.batch_size x data.max_length tokens), so set data.batch_tokens=0")
  if config.data.max_length > config.model.max_length:
    problems.append(f"data.max_length={config.data.max_length} exceeds model.max_length={config.model.max_length}")
  bad_lengths = [length for length in config.train.eval_lengths
                 if not isinstance(length, int) or not 2 <= length <= config.model.max_length]
  if bad_lengths:
    problems.append(f"train.eval_lengths={tuple(config.train.eval_lengths)}: {bad_lengths} not whole numbers from 2 "
                    f"to model.max_length={config.model.max_length}; give e.g. train.eval_lengths=(256, 512)")
  if config.data.batch_size % config.train.grad_accumulation_steps:
    problems.append(f"data.batch_size={config.data.batch_size} is not divisible by "
                    f"train.grad_accumulation_steps={config.train.grad_accumulation_steps}")
  if config.train.average_checkpoints > config.train.keep_checkpoints:
    problems.append(f"train.average_checkpoints={config.train.average_checkpoints} needs train.keep_checkpoints "
                    f">= it (now {config.train.keep_checkpoints})")
  if not 0 <= config.optimizer.cooldown_fraction <= 0.5:
    problems.append(f"optimizer.cooldown_fraction={config.optimizer.cooldown_fraction} is not in [0, 0.5]: the "
                    "cool-down must start after a time budget's planning steps (0 = off)")
  if config.train.budget_minutes and config.train.bleu_every:
    problems.append(f"train.bleu_every={config.train.bleu_every} decodes during training, which a time budget cannot "
                    f"plan for (train.budget_minutes={config.train.budget_minutes:g}); set train.bleu_every=0")
  if config.parallel.mode not in ("mesh", "pmap"):
    problems.append(f"parallel.mode='{config.parallel.mode}' is not 'mesh' or 'pmap'")
  if config.decode.method not in ("beam", "greedy", "sample"):
    problems.append(f"decode.method='{config.decode.method}' is not 'beam', 'greedy' or 'sample'")
  if problems:
    raise ValueError("invalid config: " + "; ".join(problems))


def flatten(config: ml_collections.ConfigDict, prefix: str = "") -> dict[str, Any]:
  """`{dotted_key: value}` of every leaf."""
  flat = {}
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict) and len(value):
      flat.update(flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def import_file(file: str | pathlib.Path, kind: str, example: str):
  """Imports a Python file by path (config and sweep files are not modules of a package)."""
  file = pathlib.Path(file)
  if not file.is_file():
    raise FileNotFoundError(f"{kind} file '{file}' does not exist (pass e.g. {example})")
  spec = importlib.util.spec_from_file_location(f"jformer_{kind}_{file.stem}", file)
  module = importlib.util.module_from_spec(spec)
  try:
    spec.loader.exec_module(module)
  except SyntaxError as e:
    raise ValueError(f"{kind} file '{file}' does not parse: line {e.lineno}: {e.msg} (fix the Python syntax there)"
                     ) from e
  return module


def _read(path) -> ml_collections.ConfigDict:
  path_str, _, arg = str(path).partition(":")
  file = pathlib.Path(path_str)
  module = import_file(file, "config", "--config=configs/demo.py")
  if not hasattr(module, "get_config"):
    raise ValueError(f"config file '{file}' defines no get_config(): add `def get_config():` returning a ConfigDict "
                     "(see configs/demo.py)")
  config = module.get_config(arg) if arg else module.get_config()
  if not isinstance(config, ml_collections.ConfigDict):
    raise TypeError(f"get_config() of '{file}' returned {type(config).__name__}, not a ConfigDict")
  _check_known_keys(config, file)
  return config


def _check_known_keys(config: ml_collections.ConfigDict, file: pathlib.Path) -> None:
  """Refuses a key that config `file` added and `base_config()` lacks (a typo such as `config.train.stpes = 5`);
  keys inside `OPEN_GROUPS` are free. Checked after `get_config()`, so keys set under `config.unlocked()` (files
  that build on another file's locked config) are caught too."""
  base = base_config()
  known = set(flatten(base))
  for dotted_key in flatten(config):
    if dotted_key not in known and not dotted_key.startswith(tuple(f"{group}." for group in OPEN_GROUPS)):
      raise KeyError(f"config file '{file}': {_unknown_key_message(base, dotted_key)}")


def _unknown_key_message(config, dotted_key: str) -> str:
  known = list(flatten(config)) + list(_all_prefixes(config))
  nearest = difflib.get_close_matches(dotted_key, known, n=1, cutoff=0.0)
  hint = f"; did you mean '{nearest[0]}'?" if nearest else ""
  return f"unknown config key '{dotted_key}'{hint}"


def _all_prefixes(config, prefix=""):
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      yield f"{prefix}{key}"
      yield from _all_prefixes(value, f"{prefix}{key}.")


def _is_literal(text: str) -> bool:
  try:
    ast.literal_eval(text)
    return True
  except (ValueError, SyntaxError):
    return False


def _convert(value: Any, current: Any, dotted_key: str) -> Any:
  """Converts a command-line string to the type of the current value (bool, int, float, str, tuple...)."""
  if isinstance(current, ml_collections.ConfigDict):
    if isinstance(value, str) and _is_literal(value):
      value = ast.literal_eval(value)
    if not isinstance(value, Mapping):
      raise TypeError(f"config key '{dotted_key}' is a group; give a dict, e.g. \"{{'chunk_size': 128}}\"")
    return ml_collections.ConfigDict(dict(value))
  if not isinstance(value, str) or isinstance(current, str):
    converted = value
  elif isinstance(current, bool):
    lowered = value.lower()
    if lowered not in ("true", "false", "1", "0"):
      raise ValueError(f"config key '{dotted_key}' is a bool; got '{value}' (use true or false)")
    converted = lowered in ("true", "1")
  else:
    converted = ast.literal_eval(value) if _is_literal(value) else value
  example = f"give e.g. {dotted_key}={current!r}"
  if isinstance(current, bool) != isinstance(converted, bool) and current is not None:
    raise TypeError(f"config key '{dotted_key}' is a {type(current).__name__}; got {converted!r}: {example}")
  if isinstance(current, float) and isinstance(converted, int):
    converted = float(converted)
  if current is not None and not isinstance(converted, type(current)) and not (
      isinstance(current, (tuple, list)) and isinstance(converted, (tuple, list))):
    raise TypeError(f"config key '{dotted_key}' is a {type(current).__name__}; got {converted!r} "
                    f"({type(converted).__name__}): {example}")
  return converted
