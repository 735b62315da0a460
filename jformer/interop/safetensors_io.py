"""Reads and writes the safetensors format (Hugging Face's weight files) as numpy arrays, bfloat16 included.

The format: 8 bytes (little-endian uint64) giving the length N of a JSON header, the header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the tensors' bytes, C order,
little-endian, at those offsets from the end of the header. numpy has no bfloat16; `ml_dtypes` (a JAX dependency)
gives it one, so a bfloat16 checkpoint reads without torch.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Mapping

import ml_dtypes
import numpy as np
from etils import epath

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "I64": np.int64,
          "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
NAMES = {np.dtype(dtype): name for name, dtype in DTYPES.items()}


def read(path: epath.PathLike) -> dict[str, np.ndarray]:
  """{name: array} of a .safetensors file; ValueError naming the file when it is not one, and the tensor whose bytes
  its header places beyond the file's end or in a range of another size than its shape's (truncated or corrupt)."""
  data = epath.Path(path).read_bytes()
  redownload = "the file is truncated or corrupt; download it again"
  try:
    (length,) = struct.unpack("<Q", data[:8])
    if 8 + length > len(data):
      raise ValueError(f"its header of {length} bytes is longer than the file ({len(data)} bytes)")
    header = json.loads(data[8:8 + length])
  except (struct.error, ValueError, UnicodeDecodeError) as e:
    raise ValueError(f"{path} is not a safetensors file ({e}): {redownload}") from None
  start = 8 + length
  tensors = {}
  for name, entry in header.items():
    if name == "__metadata__":
      continue
    if entry["dtype"] not in DTYPES:
      raise ValueError(f"{path}: tensor {name} has dtype {entry['dtype']}, which jformer does not read "
                       f"(it reads {sorted(DTYPES)})")
    dtype = np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<")
    begin, end = start + entry["data_offsets"][0], start + entry["data_offsets"][1]
    size = math.prod(entry["shape"]) * dtype.itemsize
    if end > len(data) or end - begin != size:
      raise ValueError(f"{path}: tensor {name} ({entry['dtype']} {entry['shape']}: {size} bytes) is at bytes "
                       f"{begin}-{end} by the file's header, of a file of {len(data)} bytes: {redownload}")
    tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"]).astype(DTYPES[entry["dtype"]])
  return tensors


def write(path: epath.PathLike, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
  """Writes `tensors` as a .safetensors file (in name order, each C-contiguous little-endian)."""
  header, chunks, offset = {}, [], 0
  for name in sorted(tensors):
    array = np.ascontiguousarray(tensors[name])
    raw = array.astype(array.dtype.newbyteorder("<")).tobytes()
    header[name] = {"dtype": NAMES[array.dtype], "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(raw)]}
    chunks.append(raw)
    offset += len(raw)
  if metadata:
    header["__metadata__"] = dict(metadata)
  encoded = json.dumps(header, separators=(",", ":")).encode()
  encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned, as the reference writer does.
  epath.Path(path).write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))


def read_folder(folder: epath.PathLike) -> dict[str, np.ndarray]:
  """Every tensor of a Hugging Face model folder: `model.safetensors`, or the shards its
  `model.safetensors.index.json` names."""
  folder = epath.Path(folder)
  index = folder / "model.safetensors.index.json"
  if index.exists():
    files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
  elif (folder / "model.safetensors").exists():
    files = ["model.safetensors"]
  else:
    raise FileNotFoundError(f"{folder} holds no model.safetensors (nor model.safetensors.index.json); jformer reads "
                            "the safetensors format (save the model with safe_serialization, the default)")
  tensors = {}
  for name in files:
    tensors.update(read(folder / name))
  return tensors
