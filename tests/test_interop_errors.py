"""`jformer import-hf` on a broken or mistaken source: each is one line naming the file (and what in it) and the fix,
and nothing is written. The broken folders are copies of the committed fixtures (tests/golden/hf) spoiled in a
tmp_path: a missing folder, a truncated model.safetensors, a config.json that does not parse or lacks a field a
family reads; for every family an architecture no table reads, a missing weight, a weight of another shape, a
truncated file, and a sharded copy whose index names a shard that is not there or that is cut short; and the import's
own data.max_length fits a model with fewer positions."""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import numpy as np
import pytest

from jformer import interop, main
from jformer.interop import safetensors_io
from jformer.interop.family import REGISTRY

GOLDEN = pathlib.Path(__file__).parent / "golden" / "hf"
FAMILIES = ["gpt2", "llama", "marian", "mistral", "qwen2"]
# Per family: a feed-forward weight (read as it is, or transposed) and a query weight (cut into heads), of layer 1.
FEED_FORWARD = {"llama": "model.layers.1.mlp.up_proj.weight", "mistral": "model.layers.1.mlp.up_proj.weight",
                "qwen2": "model.layers.1.mlp.up_proj.weight", "gpt2": "transformer.h.1.mlp.c_fc.weight",
                "marian": "model.decoder.layers.1.fc1.weight"}
QUERY = {"llama": "model.layers.1.self_attn.q_proj.weight", "mistral": "model.layers.1.self_attn.q_proj.weight",
         "qwen2": "model.layers.1.self_attn.q_proj.weight", "gpt2": "transformer.h.1.attn.c_attn.weight",
         "marian": "model.decoder.layers.1.self_attn.q_proj.weight"}
MISMATCH = "the weights do not match config.json (download them again): the checkpoint's"
NO_DOWNLOAD = ("give a folder holding a model's config.json and *.safetensors (or a Hub model id ORG/NAME, fetched "
               "when online: huggingface-cli download ORG/NAME --local-dir DIR fetches one ahead)")


def spoilt(tmp_path, family: str) -> pathlib.Path:
  """A copy of the fixture of `family` to spoil."""
  return pathlib.Path(shutil.copytree(GOLDEN / family, tmp_path / family))


def refused(source, workdir, *overrides) -> str:
  """What `import_hf` raises, checked to be one line that wrote nothing."""
  with pytest.raises((ValueError, FileNotFoundError)) as error:
    interop.import_hf(str(source), workdir, dict(item.split("=", 1) for item in overrides))
  assert "\n" not in str(error.value) and not pathlib.Path(workdir).exists()
  return str(error.value)


def test_a_missing_folder_is_named_as_such_not_taken_for_a_hub_id(tmp_path, monkeypatch):
  missing = tmp_path / "models" / "llama"
  assert refused(missing, tmp_path / "run") == f"no such folder '{missing}'; {NO_DOWNLOAD}"
  monkeypatch.chdir(tmp_path)
  (tmp_path / "models").mkdir()  # a typo in a local folder's last part reads like ORG/NAME: a path, not the network.
  assert refused("models/llama", tmp_path / "run") == f"no such folder 'models/llama'; {NO_DOWNLOAD}"
  (tmp_path / "model.safetensors").write_bytes(b"")
  assert refused("model.safetensors", tmp_path / "run") == f"'model.safetensors' is not a folder; {NO_DOWNLOAD}"


def test_a_hub_id_that_cannot_be_fetched_is_one_line_naming_the_folder_and_the_fetch(tmp_path, monkeypatch):
  import huggingface_hub

  def offline(repo_id, **kwargs):
    raise OSError(f"cannot reach the Hub for {repo_id}\n(traceback lines a user should not need)")

  monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
  monkeypatch.chdir(tmp_path)
  assert refused("some-org/some-model", tmp_path / "run") == (
      "no such folder 'some-org/some-model', and fetching it as a Hub model id failed (OSError: cannot reach the Hub "
      f"for some-org/some-model); {NO_DOWNLOAD}")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_truncated_safetensors_file_names_the_tensor_and_its_bytes_against_the_file_size(tmp_path, family):
  folder = spoilt(tmp_path, family)
  weights = folder / "model.safetensors"
  size = weights.stat().st_size - 200  # a download cut short.
  weights.write_bytes(weights.read_bytes()[:size])
  said = refused(folder, tmp_path / "run")
  match = re.fullmatch(rf"{re.escape(str(weights))}: tensor (\S+) \(F16 \[\d+, \d+\]: (\d+) bytes\) is at bytes "
                       rf"(\d+)-(\d+) by the file's header, of a file of {size} bytes: the file is truncated or "
                       r"corrupt; download it again", said)
  assert match, said
  begin, end = int(match[3]), int(match[4])
  assert end - begin == int(match[2]) and end > size
  weights.write_bytes(weights.read_bytes()[:100])  # cut inside its JSON header.
  assert refused(folder, tmp_path / "run").startswith(f"{weights} is not a safetensors file (its header of ")
  assert refused(folder, tmp_path / "run").endswith(
      "bytes is longer than the file (100 bytes)): the file is truncated or corrupt; download it again")


def test_a_config_json_that_does_not_parse_is_named_with_its_line_and_column(tmp_path):
  folder = spoilt(tmp_path, "llama")
  config = folder / "config.json"
  text = config.read_text()
  config.write_text(text + "}\n")  # a stray brace after the object.
  line = text.count("\n") + 1
  assert refused(folder, tmp_path / "run") == (
      f"{config} is not valid JSON: Extra data at line {line} column 1; fix it there, or download it again")
  config.write_text("[]\n")
  assert refused(folder, tmp_path / "run") == f"{config} holds a JSON list, not an object of fields; download it again"


@pytest.mark.parametrize("family, field", [("llama", "vocab_size"), ("gpt2", "vocab_size"), ("marian", "vocab_size"),
                                           ("mistral", "num_attention_heads"), ("qwen2", "intermediate_size"),
                                           ("gpt2", "n_embd"), ("marian", "encoder_layers")])
def test_a_config_without_a_field_its_family_reads_names_the_field(tmp_path, family, field):
  folder = spoilt(tmp_path, family)
  config = json.loads((folder / "config.json").read_text())
  del config[field]
  (folder / "config.json").write_text(json.dumps(config))
  assert refused(folder, tmp_path / "run") == (
      f"{folder / 'config.json'} has no '{field}', which jformer needs to build the model; use the model's complete "
      "config.json (download it again)")


@pytest.mark.parametrize("family", ["llama", "marian"])
def test_the_imports_rows_fit_a_model_with_fewer_positions(tmp_path, family):
  """The fixtures have 64 positions, fewer than the import's rows (256, Marian's 128): the run's rows are 64."""
  config = interop.import_hf(str(GOLDEN / family), tmp_path / "run")
  assert config.model.max_length == 64 and config.data.max_length == 64
  assert json.loads((tmp_path / "run" / "config.json").read_text())["data"]["max_length"] == 64
  assert refused(GOLDEN / family, tmp_path / "other", "data.max_length=100") == (
      "invalid config: data.max_length=100 exceeds model.max_length=64; give data.max_length=64 or less")


def test_the_command_says_it_in_one_line(tmp_path):
  folder = spoilt(tmp_path, "gpt2")
  (folder / "config.json").write_text("{\"architectures\": [\"GPT2LMHeadModel\"],\n")
  with pytest.raises(SystemExit) as stop:
    main.main(["import-hf", str(folder), f"--workdir={tmp_path / 'run'}"])
  assert stop.value.code == (f"jformer import-hf: error: {folder / 'config.json'} is not valid JSON: Expecting "
                             "property name enclosed in double quotes at line 2 column 1; fix it there, or download "
                             "it again")
  assert not (tmp_path / "run").exists()


def rewrite_weights(folder: pathlib.Path, change) -> None:
  """model.safetensors of `folder` written again with `change(tensors)` applied."""
  tensors = safetensors_io.read(folder / "model.safetensors")
  change(tensors)
  safetensors_io.write(folder / "model.safetensors", tensors)


@pytest.mark.parametrize("family", FAMILIES)
def test_an_architecture_no_table_reads_is_named(tmp_path, family):
  folder = spoilt(tmp_path, family)
  config = json.loads((folder / "config.json").read_text())
  (folder / "config.json").write_text(json.dumps({**config, "architectures": ["FalconForCausalLM"]}))
  assert refused(folder, tmp_path / "run") == (
      f"config.json lists architectures ['FalconForCausalLM']; jformer imports {REGISTRY.available()}")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_missing_weight_is_named(tmp_path, family):
  folder = spoilt(tmp_path, family)
  rewrite_weights(folder, lambda tensors: tensors.pop(FEED_FORWARD[family]))
  assert refused(folder, tmp_path / "run") == (
      f"the checkpoint lacks ['{FEED_FORWARD[family]}'] (its family's table reads them); is it complete?")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_weight_of_another_shape_is_named_with_both_shapes(tmp_path, family):
  """One more row: a weight read as it is or transposed gives a parameter of another shape than config.json's model;
  one cut into heads cannot be cut (GPT-2's fused query, key and value can, into a query of another shape)."""
  folder = spoilt(tmp_path, family)

  def one_more_row(name):
    return lambda tensors: tensors.update({name: np.concatenate([tensors[name], tensors[name][:1]])})

  rewrite_weights(folder, one_more_row(FEED_FORWARD[family]))
  parameter, made, want = {"gpt2": ("wi", [33, 64], [32, 64]), "marian": ("wi", [32, 65], [32, 64])}.get(
      family, ("wi_1", [32, 65], [32, 64]))
  rows = [33, 64] if family == "gpt2" else [65, 32]
  assert refused(folder, tmp_path / "run") == (
      f"{MISMATCH} {FEED_FORWARD[family]} {rows} makes decoder/layer_1/feed_forward/{parameter}/kernel {made}, where "
      f"the model config.json describes has {want}")
  folder = spoilt(tmp_path / "query", family)
  rewrite_weights(folder, one_more_row(QUERY[family]))
  said = refused(folder, tmp_path / "run")
  if family == "gpt2":
    assert said == (f"{MISMATCH} {QUERY[family]} [33, 96] makes decoder/layer_1/self_attention/query/kernel "
                    "[33, 4, 8], where the model config.json describes has [32, 4, 8]")
  else:
    assert said == (f"{MISMATCH} {QUERY[family]} [33, 32] cannot become decoder/layer_1/self_attention/query/kernel "
                    "(cannot reshape array of size 1056 into shape (32,4,8))")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sharded_checkpoint_missing_a_shard_or_with_one_cut_short_is_named(tmp_path, family):
  folder = spoilt(tmp_path, family)
  weights = safetensors_io.read(folder / "model.safetensors")
  (folder / "model.safetensors").unlink()
  files = safetensors_io.write_folder(folder, weights.items(), "16KB")
  shards, index = files[:-1], folder / safetensors_io.INDEX
  assert len(shards) >= 3 and files[-1] == safetensors_io.INDEX
  second = folder / shards[1]
  data = second.read_bytes()
  second.unlink()
  assert refused(folder, tmp_path / "run") == (
      f"{index} names shard {shards[1]}, which {folder} lacks (1 of {len(shards)} shards missing): the download is "
      "incomplete; download the model again")
  second.write_bytes(data[:-100])
  said = refused(folder, tmp_path / "run")
  assert said.startswith(f"{second}: tensor ") and said.endswith(
      f"by the file's header, of a file of {len(data) - 100} bytes: the file is truncated or corrupt; download it "
      "again")
