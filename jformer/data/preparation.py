"""A run's one-time data preparation (the tfds build of its dataset, its SentencePiece vocabulary), done once per
folder when several processes start together on one workdir (the hosts of a pod, the tasks of a SLURM job).

How (`prepare`):
1. Process 0 prepares first; the other processes wait for it through the coordination service (no device
   collective, for hours if need be: `jformer.coordination`), and stop with its error if it fails.
2. Then each other process runs the same preparation, which finds process 0's work in a shared folder (NFS,
   gs://) and only reads it, or, in a host-local folder (e.g. `data.data_dir` on a local disk), prepares its own
   copy there.
3. Each preparation of a local folder (the tfds `data_dir`, the vocabulary's folder) holds an exclusive lock on
   `<folder>/.jformer_prepare.lock` (`paths.file_lock`, which NFS also honours), so processes that share a local
   folder but not process 0's (several processes per host, each host with its own disk) take turns, and so do
   separate runs started together on one `data.data_dir`. A non-local folder (gs://) takes no lock: it is
   shared by every process, so step 1 has prepared it. A file system without locks (Lustre mounted without
   `flock`) logs a warning and relies on step 1 alone.
If process 0 fails while preparing with a one-line error (a full disk, a bad file), the waiting processes stop with
the same line; any other failure ends the job through JAX's coordination service.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import shutil
import time
from typing import Callable, Iterator, TypeVar

import jax
from absl import logging
from etils import epath

from jformer import coordination, paths
from jformer.data.mixture import dataset_paths
from jformer.data.sources import bundled_corpus_path, bundled_text_path, synthetic_entry
from jformer.data.tokenizer import Tokenizer
from jformer.data.workdir import load_tokenizer, source_args, train_splits, vocab_path

LOCK_FILE = ".jformer_prepare.lock"
T = TypeVar("T")


class NoSpaceError(ValueError):
  """The disk filled up while the data or the vocabulary was prepared (nothing half-written is kept by tfds)."""


def prepare(config, workdir: str) -> Tokenizer:
  """Prepares `config.data`'s dataset and vocabulary on process 0, then on the other processes (see the module
  docstring), and returns the run's tokenizer.

  Raises:
    NoSpaceError: a disk filled up, naming the folder and about how much space the preparation needs.
  """
  args = source_args(config, workdir)
  if synthetic_entry(config.data.dataset) is not None:  # generated rows, a fixed vocabulary: nothing to prepare.
    return load_tokenizer(config, workdir)

  def prepare_here() -> Tokenizer:
    with folder_lock(args["data_dir"]):
      with no_space_said(args["data_dir"], config):
        train_splits(config, workdir)  # the first load builds the datasets' tfds files.
    with folder_lock(vocab_path(config, workdir).parent):
      with no_space_said(vocab_path(config, workdir).parent, config):
        return load_tokenizer(config, workdir)

  return process_0_first(prepare_here, "data prepared")


@contextlib.contextmanager
def no_space_said(folder: epath.PathLike, config) -> Iterator[None]:
  """Turns a full disk while writing into `folder` (an OSError ENOSPC, or tfds's RuntimeError from its ArrayRecord
  writer) into one `NoSpaceError` line naming the folder, the space left and about what the data needs."""
  try:
    yield
  except (OSError, RuntimeError) as e:
    if not (getattr(e, "errno", None) == errno.ENOSPC or "No space left on device" in str(e)):
      raise
    left = ""
    if paths.is_local(folder):
      existing = pathlib.Path(os.fspath(folder))
      while not existing.exists():
        existing = existing.parent
      left = f" ({shutil.disk_usage(existing).free / 2**20:,.1f} MiB free there)"
    needed = corpus_bytes(config)
    need = f"; the prepared data takes about {2 * needed / 2**20:,.1f} MiB" if needed else ""
    raise NoSpaceError(f"no space left on the device of {os.fspath(folder)} while preparing the data{left}{need}: "
                       "free space there, or put the prepared data on another disk with --config.data.data_dir=DIR; "
                       "then rerun the same command") from None


def corpus_bytes(config) -> int:
  """The uncompressed size of the folder datasets' text (`parallel_text`/`text` with a path, or the bundled corpora:
  `data.dataset`'s, or each `data.mixture` source's), 0 for tfds datasets; the prepared ArrayRecord files take
  about as much again."""
  total = 0
  for dataset, path in dataset_paths(config):
    if dataset not in ("parallel_text", "text"):
      continue
    folder = path or (bundled_corpus_path() if dataset == "parallel_text" else bundled_text_path())
    for file in pathlib.Path(os.fspath(paths.absolute(folder))).glob("*"):
      if file.suffix == ".gz":  # gzip keeps the uncompressed size (mod 2^32) in its last 4 bytes.
        with open(file, "rb") as f:
          f.seek(-4, os.SEEK_END)
          total += int.from_bytes(f.read(4), "little")
      elif file.is_file():
        total += file.stat().st_size
  return total


def process_0_first(fn: Callable[[], T], name: str) -> T:
  """`fn()` on process 0, then, once it returned there, on every other process; `fn()` alone with one process.

  The others wait through the coordination service (`coordination.process_0_decides`, no device collective, for up
  to `PREPARE_TIMEOUT_S`: preparing WMT takes hours), and if process 0 fails with a one-line error they stop with the
  same line.

  Args:
    fn: the preparation; it must reuse what an earlier call left in place.
    name: the name of the wait (the same on every process; unique per use).
  """
  if jax.process_count() == 1:
    return fn()
  result = []
  index = jax.process_index()
  if index != 0:
    logging.info("process %d: waiting for process 0 to prepare the data.", index)
  start = time.perf_counter()
  coordination.process_0_decides(name, lambda: result.append(fn()), timeout_s=coordination.PREPARE_TIMEOUT_S)
  if index == 0:
    return result[0]
  logging.info("process %d: process 0 done after %.0fs; preparing (or reusing) here.", index,
               time.perf_counter() - start)
  return fn()


@contextlib.contextmanager
def folder_lock(folder: epath.PathLike) -> Iterator[None]:
  """Holds an exclusive lock on `<folder>/.jformer_prepare.lock` (created with the folder; `paths.file_lock`, waiting)
  while the block runs. No lock for a folder given as a URL (gs://...), one where the lock file cannot be created
  (a read-only folder, where nothing will be prepared either) or a file system that refuses locks (Lustre without
  `flock`; logged)."""
  if not paths.is_local(folder):
    yield
    return
  with contextlib.ExitStack() as stack:
    try:
      os.makedirs(folder, exist_ok=True)
      stack.enter_context(paths.file_lock(os.path.join(folder, LOCK_FILE)))
    except OSError as e:  # read-only (nothing to prepare there) or no locks on this file system.
      logging.info("no preparation lock in %s (%s); process 0 still prepares first.", folder, e)
    yield
