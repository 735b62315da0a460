"""Checks of a training run's inputs before anything is written: the workdir, the data files, the vocabulary.

`check_run_inputs` raises a ValueError (or FileNotFoundError) naming the problem and the fix, so a bad input ends
a run in one line and leaves no config.json, tfds folder or vocabulary behind.
"""

from __future__ import annotations

import os
import tempfile

from etils import epath

from jformer import paths
from jformer.data import documents, parallel_text
from jformer.data.mixture import dataset_paths
from jformer.data.pretrained_vocab import PretrainedTokenizer, is_pretrained_vocabulary
from jformer.data.sources import get_dataset
from jformer.data.tokenizer import Tokenizer


def check_run_inputs(config, workdir: epath.PathLike) -> None:
  """Refuses, before a run writes anything, a workdir it cannot write, an unknown dataset, bad parallel text
  (missing, empty, misaligned or non-UTF-8 files: `parallel_text.check_aligned`), a bad "text" folder (missing
  files, a split without documents, non-UTF-8 text: `documents.count_documents`) and a missing or mismatched
  `data.vocab_path`."""
  check_workdir(workdir)
  for dataset, path in dataset_paths(config):  # data.dataset's, or each data.mixture source's.
    get_dataset(dataset)  # an unknown name raises a KeyError listing the known ones.
    if dataset == "parallel_text" and path:  # the bundled corpus ("") is known good.
      parallel_text.check_aligned(parallel_text.find_split_files(paths.absolute(path)))
    if dataset == "text" and path:  # the bundled corpus ("") is known good.
      documents.count_documents(documents.find_split_files(paths.absolute(path)))
  if config.data.vocab_path:
    check_vocab(config.data.vocab_path, config.model.vocab_size)


def check_workdir(workdir: epath.PathLike) -> None:
  """Refuses a `--workdir` that is a file, or a local one (or its nearest existing parent) this user cannot write."""
  path = paths.absolute(workdir)
  if path.exists() and not path.is_dir():
    raise ValueError(f"--workdir {path} is a file, not a folder; give a folder path (new or of an earlier run).")
  if not paths.is_local(path):
    return
  existing = path
  while not existing.exists():
    existing = existing.parent
  try:
    with tempfile.TemporaryFile(dir=existing):  # what really can be written (a read-only mount, root's rights).
      pass
  except OSError as e:
    mount, kind = file_system(os.fspath(existing))
    if kind in KERNEL_FILE_SYSTEMS:
      raise ValueError(f"--workdir {path} is under {mount}, the kernel's {kind} file system, where no folder can "
                       "be made; give a folder on a disk, e.g. --workdir=runs/demo.") from e
    raise ValueError(f"--workdir {path} cannot be written ({existing}: {e.strerror}); give a writable folder or fix "
                     "its permissions.") from e


# File systems the kernel shows its own state in (/proc, /sys, ...): nothing can be created there.
KERNEL_FILE_SYSTEMS = ("proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "configfs", "bpf",
                       "pstore", "devpts", "mqueue", "fusectl")


def file_system(path: str) -> tuple[str, str]:
  """(mount point, type) of the file system that holds the existing local `path`, from /proc/mounts (the longest
  mount point above it); ('', '') where unknown."""
  found = ("", "")
  try:
    with open("/proc/mounts", encoding="utf-8") as mounts:
      for line in mounts:
        point, kind = line.split()[1:3]
        point = point.replace("\\040", " ")
        if os.path.commonpath([path, point]) == point and len(point) > len(found[0]):
          found = (point, kind)
  except (OSError, ValueError, IndexError):
    return ("", "")
  return found


def check_vocab(vocab_path: epath.PathLike, vocab_size: int) -> None:
  """Refuses a `data.vocab_path` that does not exist or whose size is not `model.vocab_size`: a SentencePiece model,
  or a pretrained vocabulary (`pretrained_vocab`, a .json file)."""
  path = epath.Path(vocab_path)
  if not path.is_file():
    raise FileNotFoundError(f"data.vocab_path {os.fspath(path)} does not exist; give an existing SentencePiece "
                            ".model file (or an imported model's vocab/pretrained_vocab.json), or leave "
                            "data.vocab_path empty to train one into <workdir>/vocab/.")
  reader = PretrainedTokenizer if is_pretrained_vocabulary(path) else Tokenizer
  try:
    tokenizer = reader.from_file(path)
  except ValueError as e:  # not a vocabulary file.
    raise ValueError(f"data.vocab_path {e}; give a .model file written by SentencePiece (or an imported model's "
                     "vocab/pretrained_vocab.json), or leave data.vocab_path empty to train one.") from None
  check_size(tokenizer, path, vocab_size)


def check_size(tokenizer, path: epath.PathLike, vocab_size: int, what: str = "data.vocab_path") -> None:
  """Refuses a vocabulary (read from `path`, named as `what`) whose size is not `model.vocab_size`."""
  if tokenizer.vocab_size != vocab_size:
    raise ValueError(f"{what} {os.fspath(path)} has {tokenizer.vocab_size} pieces but model.vocab_size is "
                     f"{vocab_size}; set --config.model.vocab_size={tokenizer.vocab_size} or give a vocabulary of "
                     f"{vocab_size} pieces.")
