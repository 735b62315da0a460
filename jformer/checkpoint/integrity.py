"""Checksum manifests: a corrupted, truncated or incomplete checkpoint is detected before it is restored.

Orbax writes a step atomically (a temporary folder renamed when complete) but never checks the bytes it reads
back: a flipped byte in an array file restores garbage (or non-finite values), a removed file ends in a
TensorStore traceback. `write_manifest(folder)` records the size and sha256 of every file of a finished
checkpoint folder in `<folder>/MANIFEST`; `verify(folder)` re-reads them and names the first file that differs.

A folder without a manifest (saved before jformer wrote manifests, or whose writer was killed between Orbax's
rename and the manifest) is not verified: `verify` says so and the caller decides (restore warns and accepts it).
Files go through `etils.epath`, so gs:// checkpoints are verified the same way (at the cost of reading them twice).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jax
import numpy as np
from etils import epath

from jformer import paths

MANIFEST = "MANIFEST"
_CHUNK = 1 << 22


class CorruptCheckpointError(ValueError):
  """A checkpoint whose files differ from its manifest, or whose parameters are not finite."""


def write_manifest(folder: epath.PathLike) -> None:
  """Writes `<folder>/MANIFEST`: `{relative path: [size, sha256]}` of every file below `folder` (atomically)."""
  folder = epath.Path(folder)
  entries = {name: [path.stat().length, _sha256(path)] for name, path in _files(folder).items()}
  paths.write_atomically(folder / MANIFEST, json.dumps(entries, indent=0, sort_keys=True))


def has_manifest(folder: epath.PathLike) -> bool:
  """Whether `folder` holds a manifest (see `verify`)."""
  return (epath.Path(folder) / MANIFEST).exists()


def verify(folder: epath.PathLike) -> str | None:
  """The first difference between `folder` and its manifest (a missing, resized or changed file), or None.

  Files added since the manifest (none are, by jformer) are ignored. Raises FileNotFoundError without a manifest.
  """
  folder = epath.Path(folder)
  try:
    entries = json.loads((folder / MANIFEST).read_text())
  except json.JSONDecodeError:
    return f"its {MANIFEST} is not valid JSON"
  files = _files(folder)
  for name, (size, digest) in sorted(entries.items()):
    if name not in files:
      return f"file {name} is missing"
    if (actual := files[name].stat().length) != size:
      return f"file {name} has {actual} bytes, not {size}"
    if _sha256(files[name]) != digest:
      return f"file {name} does not match its sha256"
  return None


def check_finite(params: Any, where: str) -> None:
  """Raises CorruptCheckpointError naming the first params leaf (NumPy or jax arrays) holding NaN or inf."""
  for key, leaf in jax.tree_util.tree_leaves_with_path(params):
    array = np.asarray(leaf)
    if np.issubdtype(array.dtype, np.inexact) and not np.isfinite(array).all():
      raise CorruptCheckpointError(
          f"{where} holds non-finite values in params leaf {jax.tree_util.keystr(key)} "
          f"({int(array.size - np.isfinite(array).sum())} of {array.size}); it is corrupt: choose another "
          "checkpoint (--checkpoint=<step>) or retrain.")


def _files(folder: epath.Path) -> dict[str, epath.Path]:
  """Every regular file below `folder` by its path relative to `folder`, the manifest itself excluded."""
  found = {}
  for parent, _, names in folder.walk():
    for name in names:
      path = epath.Path(parent) / name
      found[str(path.relative_to(folder))] = path
  found.pop(MANIFEST, None)
  return found


def _sha256(path: epath.Path) -> str:
  digest = hashlib.sha256()
  with path.open("rb") as f:
    while chunk := f.read(_CHUNK):
      digest.update(chunk)
  return digest.hexdigest()
