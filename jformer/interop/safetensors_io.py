"""Reads and writes the safetensors format (Hugging Face's weight files) as numpy arrays, bfloat16 included, one tensor
at a time, so that a model of many gigabytes converts within about its own size in memory.

The format: 8 bytes (little-endian uint64) giving the length N of a JSON header, the header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the tensors' bytes, C order,
little-endian, at those offsets from the end of the header. numpy has no bfloat16; `ml_dtypes` (a JAX dependency)
gives it one, so a bfloat16 checkpoint reads without torch. A model too big for one file is split into shards
(model-00001-of-00004.safetensors, ...) that `model.safetensors.index.json` lists ({"weight_map": {tensor: file}}).

Reading maps each tensor's byte range of its file (`np.memmap`) and copies it out, so only the tensor being converted
is read: the file is never read whole. Writing holds one shard's tensors at a time.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import struct
from typing import Iterable, Iterator, Mapping

import ml_dtypes
import numpy as np
from etils import epath

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
NAMES = {np.dtype(dtype): name for name, dtype in DTYPES.items()}
SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"
REDOWNLOAD = "the file is truncated or corrupt; download it again"
# transformers' sizes: "5GB" is 5 * 10^9 bytes, "5GiB" 5 * 2^30.
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
         "GIB": 2**30, "TIB": 2**40}


@dataclasses.dataclass(frozen=True)
class Entry:
  """Where a tensor's bytes are: `path`, from byte `begin` (of the file), of `dtype` (little-endian) and `shape`."""
  path: str
  dtype: np.dtype
  shape: tuple[int, ...]
  begin: int

  def read(self, dtype=None) -> np.ndarray:
    """The tensor, its byte range mapped and copied into memory (as `dtype` when given), then unmapped."""
    mapped = np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.begin, shape=self.shape)
    return np.array(mapped, dtype=dtype or self.dtype.newbyteorder("="))


def header(path: epath.PathLike) -> dict[str, Entry]:
  """{name: `Entry`} of a .safetensors file, from its header alone; ValueError naming the file when it is not one, and
  the tensor whose bytes its header places beyond the file's end or in a range of another size than its shape's
  (truncated or corrupt)."""
  path = os.fspath(path)
  size = os.path.getsize(path)
  try:
    with open(path, "rb") as file:
      (length,) = struct.unpack("<Q", file.read(8))
      if 8 + length > size:
        raise ValueError(f"its header of {length} bytes is longer than the file ({size} bytes)")
      fields = json.loads(file.read(length))
  except (struct.error, ValueError, UnicodeDecodeError) as e:
    raise ValueError(f"{path} is not a safetensors file ({e}): {REDOWNLOAD}") from None
  entries = {}
  for name, entry in fields.items():
    if name == "__metadata__":
      continue
    if entry["dtype"] not in DTYPES:
      raise ValueError(f"{path}: tensor {name} has dtype {entry['dtype']}, which jformer does not read "
                       f"(it reads {sorted(DTYPES)})")
    dtype = np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<")
    begin, end = (8 + length + offset for offset in entry["data_offsets"])
    nbytes = math.prod(entry["shape"]) * dtype.itemsize
    if end > size or end - begin != nbytes:
      raise ValueError(f"{path}: tensor {name} ({entry['dtype']} {entry['shape']}: {nbytes} bytes) is at bytes "
                       f"{begin}-{end} by the file's header, of a file of {size} bytes: {REDOWNLOAD}")
    entries[name] = Entry(path, dtype, tuple(entry["shape"]), begin)
  return entries


def read(path: epath.PathLike) -> dict[str, np.ndarray]:
  """{name: array} of a .safetensors file (every tensor in memory: for small files)."""
  return {name: entry.read() for name, entry in header(path).items()}


class Tensors(Mapping):
  """The tensors of a Hugging Face model folder by name, read from their files only when asked for, one at a time
  (each time: hold on to what you keep), as `dtype` when given (else each as saved).

  The folder holds `model.safetensors`, or the shards its `model.safetensors.index.json` names; every file's header
  is read (and checked) up front, so a truncated or missing shard is refused before any tensor is converted.
  """

  def __init__(self, folder: epath.PathLike, dtype=None):
    folder = epath.Path(folder)
    self.dtype = dtype
    if (folder / INDEX).exists():
      files = _shard_files(folder / INDEX)
    elif (folder / SINGLE).exists():
      files = {SINGLE: set()}
    else:
      raise FileNotFoundError(f"{folder} holds no {SINGLE} (nor {INDEX}); jformer reads the safetensors format (save "
                              "the model with safe_serialization, the default)")
    self._entries = {}
    for file, names in sorted(files.items()):
      entries = header(folder / file)
      absent = sorted(names - set(entries))
      if absent:
        raise ValueError(f"{folder / INDEX} places {absent[:3]} in {file}, whose header lacks them: the shards do "
                         "not match the index; download the model again")
      self._entries.update(entries)

  def __getitem__(self, name: str) -> np.ndarray:
    return self._entries[name].read(self.dtype)

  def __iter__(self) -> Iterator[str]:
    return iter(self._entries)

  def __len__(self) -> int:
    return len(self._entries)


def read_folder(folder: epath.PathLike, dtype=None) -> Tensors:
  """Every tensor of a Hugging Face model folder, each read when asked for (`Tensors`)."""
  return Tensors(folder, dtype)


def _shard_files(index: epath.Path) -> dict[str, set[str]]:
  """{shard file: the tensors the index places in it} of a `model.safetensors.index.json`, each file checked to be
  in the folder."""
  try:
    weight_map = json.loads(index.read_text())["weight_map"]
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"{index} is not a safetensors index (no weight_map: {type(e).__name__} {e}); download it "
                     "again") from None
  files: dict[str, set[str]] = {}
  for name, file in weight_map.items():
    files.setdefault(file, set()).add(name)
  missing = sorted(file for file in files if not (index.parent / file).exists())
  if missing:
    raise FileNotFoundError(f"{index} names shard {missing[0]}, which {index.parent} lacks ({len(missing)} of "
                            f"{len(files)} shards missing): the download is incomplete; download the model again")
  return files


def write(path: epath.PathLike, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
  """Writes `tensors` as a .safetensors file (in name order, each C-contiguous little-endian), one tensor's bytes at a
  time, through a temporary file renamed when complete."""
  path = epath.Path(path)
  arrays = {name: np.ascontiguousarray(tensors[name]) for name in sorted(tensors)}
  header_fields, offset = {}, 0
  for name, array in arrays.items():
    header_fields[name] = {"dtype": NAMES[array.dtype.newbyteorder("=")], "shape": list(array.shape),
                           "data_offsets": [offset, offset + array.nbytes]}
    offset += array.nbytes
  if metadata:
    header_fields["__metadata__"] = dict(metadata)
  encoded = json.dumps(header_fields, separators=(",", ":")).encode()
  encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned, as the reference writer does.
  partial = path.parent / f".partial-{path.name}"
  with partial.open("wb") as file:
    file.write(struct.pack("<Q", len(encoded)) + encoded)
    for array in arrays.values():
      file.write(array.astype(array.dtype.newbyteorder("<"), copy=False).reshape(-1).view(np.uint8).data)
  partial.replace(path)


def parse_size(size: str | int) -> int:
  """Bytes of a size as transformers writes it: "5GB" (10^9), "500MiB" (2^20), or a number of bytes."""
  match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", str(size), re.IGNORECASE)
  if not match or float(match[1]) <= 0:
    raise ValueError(f"max_shard_size={size!r} is not a size: give bytes or a number with a unit, e.g. 5GB, 500MiB")
  return int(float(match[1]) * UNITS[(match[2] or "").upper()])


def write_folder(folder: epath.PathLike, tensors: Iterable[tuple[str, np.ndarray]], max_shard_size: str | int,
                 metadata: Mapping[str, str] | None = None) -> list[str]:
  """Writes the (name, array) pairs `tensors`, taken in order, into `folder`: shards of at most `max_shard_size`
  (`parse_size`; a bigger tensor is a shard alone) with the `model.safetensors.index.json` that maps each tensor to
  its shard, as transformers' `save_pretrained` does, or `model.safetensors` when they fit in one. Only the shard
  being filled is held in memory. Returns the names of the files written."""
  folder, limit = epath.Path(folder), parse_size(max_shard_size)
  shards: list[list[str]] = []  # the tensor names of each shard written, under a temporary name until all are.
  current: dict[str, np.ndarray] = {}
  total = filled = 0  # bytes of all tensors, of the shard being filled.

  def flush():
    write(folder / f".shard-{len(shards)}", current, metadata)
    shards.append(sorted(current))
    current.clear()

  for name, array in tensors:
    array = np.ascontiguousarray(array)
    if current and filled + array.nbytes > limit:
      flush()
      filled = 0
    current[name] = array
    filled += array.nbytes
    total += array.nbytes
  flush()
  names = [SINGLE] if len(shards) == 1 else [f"model-{i:05d}-of-{len(shards):05d}.safetensors"
                                             for i in range(1, len(shards) + 1)]
  for i, name in enumerate(names):
    (folder / f".shard-{i}").replace(folder / name)
  if len(shards) > 1:
    weight_map = {tensor: name for name, shard in zip(names, shards) for tensor in shard}
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    names.append(INDEX)
  return names
