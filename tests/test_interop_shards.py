"""Checkpoints in shards, dtypes kept, parameters alone: a sharded copy of each committed fixture (tests/golden/hf,
split by `safetensors_io.write_folder` at a tiny size) imports to the same parameters as the single file, bit for bit; an
export writes shards of at most --max_shard_size with their index (or one model.safetensors when it fits) that import
back bit for bit; a bfloat16 checkpoint stays bfloat16 in the run and in its export unless --dtype says; the import
writes the parameters alone (no optimizer state), which decoding loads and `jformer train` starts from
(tests/test_interop_cli.py); and the export of each fixture is the fixture: the same tensors (names, shapes, dtypes,
values) and the same config.json, so transformers' from_pretrained reads it as it reads the fixture."""

from __future__ import annotations

import json
import pathlib
import shutil

import jax
import ml_dtypes
import numpy as np
import pytest

from jformer import checkpoint, interop
from jformer.interop import safetensors_io

GOLDEN = pathlib.Path(__file__).parent / "golden" / "hf"
FAMILIES = ["gpt2", "llama", "marian", "mistral", "qwen2"]


def copy_without_weights(family: str, folder: pathlib.Path) -> pathlib.Path:
  """The fixture's config and tokenizer files in `folder`, no weights."""
  folder.mkdir()
  for file in (GOLDEN / family).iterdir():
    if file.name != "model.safetensors":
      shutil.copy(file, folder / file.name)
  return folder


def sharded(family: str, folder: pathlib.Path, max_shard_size: str = "16KB") -> list[str]:
  """The fixture of `family` in `folder` with its weights in shards of at most `max_shard_size`."""
  copy_without_weights(family, folder)
  return safetensors_io.write_folder(folder, safetensors_io.read(GOLDEN / family / "model.safetensors").items(),
                                     max_shard_size, metadata={"format": "pt"})


def assert_same_tree(got, want):
  """Equal bit for bit, dtypes included."""
  jax.tree.map(lambda a, b: (np.testing.assert_array_equal(a, b), a.dtype == b.dtype or pytest.fail(
      f"{a.dtype} != {b.dtype}")), got, want)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sharded_checkpoint_imports_as_its_single_file(tmp_path, family):
  files = sharded(family, tmp_path / family)
  index = json.loads((tmp_path / family / safetensors_io.INDEX).read_text())
  shards = sorted(set(index["weight_map"].values()))
  assert len(shards) >= 3 and files == shards + [safetensors_io.INDEX]
  assert shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
  original = safetensors_io.read(GOLDEN / family / "model.safetensors")
  assert index["metadata"]["total_size"] == sum(x.nbytes for x in original.values())
  for shard in shards:
    tensors = safetensors_io.read(tmp_path / family / shard)
    assert sum(x.nbytes for x in tensors.values()) <= 16_000 or len(tensors) == 1
    assert all(index["weight_map"][name] == shard for name in tensors)
  assert_same_tree(interop.convert(tmp_path / family)[1], interop.convert(GOLDEN / family)[1])


def test_an_export_writes_shards_of_the_size_asked_and_imports_back_bit_for_bit(tmp_path):
  interop.import_hf(str(GOLDEN / "llama"), tmp_path / "run")
  files = interop.export_hf(tmp_path / "run", tmp_path / "out", max_shard_size="20KB")
  index = json.loads((tmp_path / "out" / safetensors_io.INDEX).read_text())
  shards = sorted(set(index["weight_map"].values()))
  assert len(shards) == 4 and set(shards) | {safetensors_io.INDEX} <= set(files)
  assert safetensors_io.SINGLE not in files
  for shard in shards:
    assert sum(x.nbytes for x in safetensors_io.read(tmp_path / "out" / shard).values()) <= 20_000
  assert_same_tree(interop.convert(tmp_path / "out")[1], checkpoint.load_run_params(tmp_path / "run"))
  files = interop.export_hf(tmp_path / "run", tmp_path / "one")  # 5GB: it fits in one file.
  assert safetensors_io.SINGLE in files and safetensors_io.INDEX not in files


def test_a_bfloat16_checkpoint_stays_bfloat16_unless_dtype_says(tmp_path):
  folder = copy_without_weights("llama", tmp_path / "bf16")
  original = safetensors_io.read(GOLDEN / "llama" / "model.safetensors")
  safetensors_io.write(folder / "model.safetensors", {k: x.astype(ml_dtypes.bfloat16) for k, x in original.items()})
  interop.import_hf(str(folder), tmp_path / "run")
  params = checkpoint.load_run_params(tmp_path / "run")
  assert {x.dtype for x in jax.tree.leaves(params)} == {np.dtype(ml_dtypes.bfloat16)}
  interop.export_hf(tmp_path / "run", tmp_path / "out")
  assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "bfloat16"
  exported = safetensors_io.read(tmp_path / "out" / "model.safetensors")
  assert_same_tree(exported, safetensors_io.read(folder / "model.safetensors"))

  interop.import_hf(str(folder), tmp_path / "run32", dtype="float32")
  params32 = checkpoint.load_run_params(tmp_path / "run32")
  assert_same_tree(params32, jax.tree.map(lambda x: x.astype(np.float32), params))
  interop.export_hf(tmp_path / "run32", tmp_path / "out16", dtype="float16")
  assert {x.dtype for x in safetensors_io.read(tmp_path / "out16" / "model.safetensors").values()} == {
      np.dtype(np.float16)}
  with pytest.raises(ValueError, match=r"^--dtype=float8 is not one of \['bfloat16', 'float16', 'float32'\]; leave "
                     "it out to keep the checkpoint's dtype$"):
    interop.export_hf(tmp_path / "run", tmp_path / "bad", dtype="float8")
  assert not (tmp_path / "bad").exists()


def test_the_import_writes_the_parameters_alone(tmp_path):
  interop.import_hf(str(GOLDEN / "llama"), tmp_path / "run")
  with checkpoint.Checkpointer(checkpoint.checkpoints_dir(tmp_path / "run"), read_only=True) as checkpointer:
    assert checkpointer.all_steps() == [0] and checkpointer.params_only(0)
  assert_same_tree(checkpoint.load_run_params(tmp_path / "run"), interop.convert(GOLDEN / "llama")[1])


@pytest.mark.parametrize("size, nbytes", [("5GB", 5 * 10**9), ("5GiB", 5 * 2**30), ("500MB", 500 * 10**6),
                                          ("2.5kb", 2500), (" 16 KiB ", 16384), ("1000", 1000), (1000, 1000)])
def test_shard_sizes_read_as_transformers_reads_them(size, nbytes):
  assert safetensors_io.parse_size(size) == nbytes


@pytest.mark.parametrize("size", ["five GB", "5 GBs", "0", "-1KB", ""])
def test_a_shard_size_that_is_not_one_is_refused_naming_it(size):
  with pytest.raises(ValueError, match=rf"^max_shard_size={size!r} is not a size: give bytes or a number with a "
                     "unit, e.g. 5GB, 500MiB$"):
    safetensors_io.parse_size(size)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_export_of_a_fixture_is_the_fixture(tmp_path, family):
  """Offline, without transformers: import then export gives the fixture's tensors (names, shapes, float16 dtype,
  values; GPT-2's key bias, which softmax ignores, as zeros) and its config.json (with torch_dtype, the older name of
  its dtype field)."""
  interop.import_hf(str(GOLDEN / family), tmp_path / "run")
  interop.export_hf(tmp_path / "run", tmp_path / "out")
  got = safetensors_io.read(tmp_path / "out" / "model.safetensors")
  want = safetensors_io.read(GOLDEN / family / "model.safetensors")
  assert {k: (x.shape, x.dtype) for k, x in got.items()} == {k: (x.shape, x.dtype) for k, x in want.items()}
  for name, tensor in want.items():
    if name.endswith("attn.c_attn.bias"):
      tensor = np.concatenate([part if i != 1 else 0 * part for i, part in enumerate(np.split(tensor, 3))])
    np.testing.assert_array_equal(got[name], tensor, err_msg=name)
  config = json.loads((GOLDEN / family / "config.json").read_text())
  assert json.loads((tmp_path / "out" / "config.json").read_text()) == {**config, "torch_dtype": config["dtype"]}
