"""Hugging Face checkpoints in and out: `jformer import-hf SOURCE --workdir=DIR` and `jformer export-hf --workdir=DIR
OUT`.

An import writes a run's workdir that every command works on (`generate`, `evaluate`, `train` to fine-tune and
resume, `export-hf`):

    DIR/config.json           the run's config: the model section from the family's config.json, the rest
                              `FINE_TUNING` and the --config overrides of the import
    DIR/checkpoints/0/        the converted parameters alone, in the checkpoint's dtype (bfloat16 stays bfloat16)
                              unless --dtype says: `train` builds the optimizer state when it starts from them
    DIR/vocab/                the family's tokenizer in jformer's ids (`jformer.data.pretrained_vocab`)
    DIR/pretrained/           the source's config.json and tokenizer files, which an export writes back

An export writes the parameters of a run's checkpoint through the same table, in their dtype unless --dtype says,
into `OUT/model.safetensors`, or shards of at most --max_shard_size with their `model.safetensors.index.json`, beside
those files: a folder `transformers`' `from_pretrained` loads. It refuses a model that no longer has its family's
shape (a changed pattern of layer kinds, say), naming what differs.

Both go one tensor at a time (`safetensors_io`): an import holds the converted parameters and the tensor being
converted, an export the run's parameters and the shard being written (though Orbax, restoring those parameters,
holds about twice them while it reads: docs/results/interop_memory.md).
"""

from __future__ import annotations

import json
from typing import Iterator

import jax
import ml_collections
import numpy as np
from etils import epath
from flax import traverse_util

from jformer import checkpoint, paths, tasks
from jformer import config as config_lib
from jformer.checkpoint import shapes
from jformer.data.pretrained_vocab import FILE_NAME, PretrainedTokenizer, VocabularyMap, marian_tokenizer
from jformer.interop import gpt2, llama, marian  # noqa: F401 (their families register)
from jformer.interop import safetensors_io, tables
from jformer.interop.family import family_of
from jformer.models import TransformerConfig
from jformer.models.summary import param_shapes

PRETRAINED_DIR = "pretrained"
MARIAN_TOKENIZER = ("source.spm", "target.spm", "vocab.json")
WEIGHTS = (safetensors_io.SINGLE, safetensors_io.INDEX)
# The dtypes an import or export may convert to (--dtype); by default each keeps its source's.
DTYPES = {name: np.dtype(dtype) for name, dtype in
          (("float32", np.float32), ("bfloat16", safetensors_io.DTYPES["BF16"]), ("float16", np.float16))}
MAX_SHARD_SIZE = "5GB"  # transformers' save_pretrained default.
# What an imported run trains with unless the import's --config overrides say otherwise: the documents of `text`
# (the bundled English corpus, or data.path), short fine-tuning steps without label smoothing.
FINE_TUNING = {"data.dataset": "text", "data.pack": "documents", "data.max_length": 256, "data.batch_size": 8,
               "data.eval_batch_size": 8, "train.steps": 1000, "train.label_smoothing": 0.0,
               "optimizer.warmup_steps": 100, "optimizer.grad_clip_norm": 1.0, "train.checkpoint_every": 100,
               "train.eval_every": 100, "train.log_every": 10}
# Model fields an imported run may set otherwise (they do not change what the parameters compute).
FREE_MODEL_FIELDS = ("dropout_rate", "attention_dropout_rate", "dtype", "remat", "scan_layers", "z_loss")


class PretrainedConfig(dict):
  """The fields of a config.json: a field a family reads (`hf["vocab_size"]`) that the file lacks is refused here,
  for every family, naming the file and the field."""

  def __init__(self, path: epath.Path, fields: dict):
    super().__init__(fields)
    self.path = path

  def __missing__(self, key: str):
    raise ValueError(f"{self.path} has no '{key}', which jformer needs to build the model; use the model's complete "
                     "config.json (download it again)")


def read_json(path: epath.Path):
  """The contents of a JSON file of a Hugging Face folder; one that does not parse is named with its line and column."""
  try:
    return json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}; fix it there, or "
                     "download it again") from None


def read_config(folder: epath.PathLike) -> PretrainedConfig:
  """The config.json of a Hugging Face folder."""
  path = epath.Path(folder) / "config.json"
  if not path.exists():
    raise FileNotFoundError(f"{path} does not exist: give a folder in the Hugging Face layout (config.json, "
                            "model.safetensors, tokenizer files)")
  fields = read_json(path)
  if not isinstance(fields, dict):
    raise ValueError(f"{path} holds a JSON {type(fields).__name__}, not an object of fields; download it again")
  return PretrainedConfig(path, fields)


def pretrained_fields(hf: PretrainedConfig) -> tuple[dict, VocabularyMap]:
  """(jformer model fields, vocabulary map) of a family's config.json."""
  family = family_of(hf)
  vocabulary = VocabularyMap(*family.special_ids(hf), hf["vocab_size"])
  # A start token that also ends (one jformer id more): its extra id 0 is never predicted, as the family's softmax.
  return {**family.model_fields(hf), "vocab_size": vocabulary.vocab_size,
          "predicts_padding": vocabulary.start_id != vocabulary.end_id}, vocabulary


def convert(folder: epath.PathLike, dtype: str | None = None, *,
            shapes: dict | None = None) -> tuple[dict, dict, VocabularyMap]:
  """(jformer model fields, params as a nested dict of arrays, vocabulary map) of a Hugging Face folder, read one
  tensor at a time, each in its saved dtype or `dtype` (a name of `DTYPES`); given the model's parameter `shapes`
  ({path: shape}), a tensor of another shape is refused as it is read (`tables.to_jformer`)."""
  hf = read_config(folder)
  family, (fields, vocabulary) = family_of(hf), pretrained_fields(hf)
  tensors = safetensors_io.read_folder(folder, _dtype(dtype))
  flat = tables.to_jformer(family.rows(hf, vocabulary), tensors, family.num_layers(hf), ignored=family.ignored(hf),
                           shapes=shapes)
  return fields, traverse_util.unflatten_dict(flat, sep="/"), vocabulary


def to_pretrained_tensors(hf: dict, params, dtype: str | None = None) -> dict[str, np.ndarray]:
  """{name: tensor} of jformer `params` in the family's names, all at once (`pretrained_tensors` makes them one at a
  time, as export writes them)."""
  return dict(pretrained_tensors(hf, params, dtype))


def pretrained_tensors(hf: dict, params, dtype: str | None = None) -> Iterator[tuple[str, np.ndarray]]:
  """The family's (name, tensor) pairs of jformer `params` (a nested dict), through the table read backwards, made
  one at a time as they are taken, each in its parameter's dtype or `dtype` (a name of `DTYPES`)."""
  family = family_of(hf)
  vocabulary = VocabularyMap(*family.special_ids(hf), hf["vocab_size"])
  flat, cast = traverse_util.flatten_dict(jax.tree.map(np.asarray, params), sep="/"), _dtype(dtype)
  pairs = tables.to_pretrained(family.rows(hf, vocabulary), flat, family.num_layers(hf))
  return ((name, np.asarray(x, cast or x.dtype)) for name, x in pairs)


def _dtype(name: str | None) -> np.dtype | None:
  """The numpy dtype --dtype names (None: keep each tensor's)."""
  if name is not None and name not in DTYPES:
    raise ValueError(f"--dtype={name} is not one of {sorted(DTYPES)}; leave it out to keep the checkpoint's dtype")
  return None if name is None else DTYPES[name]


def _tokenizer_file(folder: epath.Path) -> tuple[str, bytes]:
  """(kind, bytes) of the folder's tokenizer: `tokenizer.json` (Hugging Face tokenizers), a SentencePiece
  `tokenizer.model`, or Marian's `source.spm`, `target.spm` and `vocab.json` (one vocabulary for both sides)."""
  if (folder / "tokenizer.json").exists():
    return "tokenizers", (folder / "tokenizer.json").read_bytes()
  if (folder / "tokenizer.model").exists():
    return "sentencepiece", (folder / "tokenizer.model").read_bytes()
  if all((folder / name).exists() for name in MARIAN_TOKENIZER):
    settings = folder / "tokenizer_config.json"
    if (folder / "target_vocab.json").exists() or (settings.exists() and read_json(settings).get("separate_vocabs")):
      raise ValueError(f"{folder}: a Marian tokenizer with separate source and target vocabularies is not imported "
                       "(jformer shares one vocabulary)")
    return "marian", marian_tokenizer(*((folder / name).read_bytes() for name in MARIAN_TOKENIZER))
  raise FileNotFoundError(f"{folder} holds no tokenizer.json, tokenizer.model or {' + '.join(MARIAN_TOKENIZER)}: "
                          "jformer needs the family's tokenizer to read and write text")


def _source_folder(source: str) -> epath.Path:
  """The folder `source` names, or a Hub model id (ORG/NAME, where no such folder or parent folder is here) fetched
  by `huggingface_hub` when online. A path that is not a folder is refused as such, never sent to the network."""
  folder = epath.Path(source)
  if folder.is_dir():
    return folder
  what = f"'{source}' is not a folder" if folder.exists() else f"no such folder '{source}'"
  fix = ("give a folder holding a model's config.json and *.safetensors (or a Hub model id ORG/NAME, fetched when "
         "online: huggingface-cli download ORG/NAME --local-dir DIR fetches one ahead)")
  if not _reads_as_hub_id(source):
    raise FileNotFoundError(f"{what}; {fix}")
  try:
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "tokenizer.model", "*.spm"]
    return epath.Path(snapshot_download(source, allow_patterns=patterns))
  except Exception as e:  # any failure to fetch (no package, no network, no such repository) is one line.
    reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
    raise FileNotFoundError(f"{what}, and fetching it as a Hub model id failed ({type(e).__name__}: {reason}); "
                            f"{fix}") from None


def _reads_as_hub_id(source: str) -> bool:
  """ORG/NAME, relative, whose ORG is no folder here (a typo in a local path's last part is a path, not an id)."""
  parts = source.split("/")
  return (len(parts) == 2 and all(parts) and not source.startswith((".", "~"))
          and not epath.Path(parts[0]).exists())


def import_hf(source: str, workdir: epath.PathLike, overrides: dict | None = None, *,
              dtype: str | None = None) -> ml_collections.ConfigDict:
  """Writes the workdir of module doc from the Hugging Face model at `source`, its parameters in their saved dtype or
  `dtype` (a name of `DTYPES`); returns the run's config. Refuses a workdir that already holds a run."""
  folder, workdir = _source_folder(source), paths.absolute(workdir)
  if (workdir / "config.json").exists():
    raise ValueError(f"{workdir} already holds a run; import into a new --workdir")
  kind, tokenizer = _tokenizer_file(folder)
  hf = read_config(folder)
  fields, vocabulary = pretrained_fields(hf)
  overrides = dict(overrides or {})
  fixed = sorted(key for key in overrides if key.startswith("model.") and key[6:] not in FREE_MODEL_FIELDS)
  if fixed:
    raise ValueError(f"{fixed} come from the pretrained model's config.json; an import may set only "
                     f"{[f'model.{f}' for f in FREE_MODEL_FIELDS]} of the model (a converted model: train "
                     "--config.train.initialize_from)")
  values = {f"model.{key}": value for key, value in fields.items()}
  fine_tuning = {**FINE_TUNING, **family_of(hf).fine_tuning}
  # Rows no longer than the model's positions (a small model's max_position_embeddings), unless the overrides say.
  fine_tuning["data.max_length"] = min(fine_tuning["data.max_length"], fields["max_length"])
  config = config_lib.checked(config_lib.from_values({**values, **fine_tuning, **overrides}))
  expected = shapes.expected(param_shapes(tasks.build_model(config)))
  _, params, _ = convert(folder, dtype, shapes={path: shape for path, (shape, _) in expected.items()})
  problem = shapes.difference(expected, params)
  if problem:
    raise ValueError(f"the converted parameters do not fit the model jformer builds from config.json: {problem}")
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / "vocab").mkdir(exist_ok=True)
  PretrainedTokenizer.write(workdir / "vocab" / FILE_NAME, kind=kind, tokenizer=tokenizer, vocabulary=vocabulary)
  kept = workdir / PRETRAINED_DIR
  kept.mkdir(exist_ok=True)
  for file in folder.iterdir():
    if file.is_file() and file.name not in WEIGHTS and not file.name.endswith((".safetensors", ".bin", ".pt")):
      (kept / file.name).write_bytes(file.read_bytes())
  checkpoint.save_run_params(workdir, params)  # `train` builds the optimizer state when it starts from them.
  config_lib.write_run(config, workdir)
  return config


def export_hf(workdir: epath.PathLike, out: epath.PathLike, which: str = "auto", *, dtype: str | None = None,
              max_shard_size: str | int = MAX_SHARD_SIZE) -> list[str]:
  """Writes the folder of module doc at `out` from the run in `workdir` (its `which` checkpoint), in the parameters'
  dtype or `dtype` (a name of `DTYPES`), in shards of at most `max_shard_size` (`safetensors_io.parse_size`);
  returns the files written. Refuses a run not imported by `import_hf` and a model that no longer has its family's
  shape."""
  safetensors_io.parse_size(max_shard_size), _dtype(dtype)  # a mistyped option: one line, before anything is read.
  workdir, out = paths.absolute(workdir), paths.absolute(out)
  kept = workdir / PRETRAINED_DIR
  if not (kept / "config.json").exists():
    raise FileNotFoundError(f"{workdir} holds no {PRETRAINED_DIR}/config.json: export-hf writes back a model "
                            "imported by `jformer import-hf` (its family's config and tokenizer files)")
  config = config_lib.load_run(workdir)
  hf = read_config(kept)
  family = family_of(hf)
  wanted = TransformerConfig.from_config({**dict(config.model), **family.model_fields(hf),
                                          **{f: config.model[f] for f in FREE_MODEL_FIELDS}})
  have = TransformerConfig.from_config(config.model)
  if have != wanted:
    differ = [f"model.{f}" for f in wanted.__dataclass_fields__ if getattr(have, f) != getattr(wanted, f)]
    raise ValueError(f"the run's model differs from its family's ({family.name}) in {differ}: a "
                     f"{hf.get('model_type')} checkpoint cannot hold it")
  if out.exists() and any(out.iterdir()):
    raise ValueError(f"{out} is not empty; export into a new folder")
  params = checkpoint.load_run_params(workdir, which, model=tasks.build_model(config))
  saved = {x.dtype for x in jax.tree.leaves(params)}
  dtype = dtype or (saved.pop().name if len(saved) == 1 else "float32")
  tensors = pretrained_tensors(hf, params, dtype)
  out.mkdir(parents=True, exist_ok=True)
  for file in kept.iterdir():
    (out / file.name).write_bytes(file.read_bytes())
  hf["torch_dtype"] = hf["dtype"] = dtype
  paths.write_atomically(out / "config.json", json.dumps(hf, indent=2) + "\n")
  safetensors_io.write_folder(out, tensors, max_shard_size, metadata={"format": "pt"})
  return sorted(file.name for file in out.iterdir())
