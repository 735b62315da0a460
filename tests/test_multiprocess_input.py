"""Several processes on one workdir: data prepared once (process 0 first, folder locks), per-host input, and a
checkpoint's data position refused under another process count; end to end with 2 processes from the CLI
(slow: prepare once, train, 1 process refused, 2 processes resume)."""

from __future__ import annotations

import collections
import os
import threading
import time

import grain
import jax
import numpy as np
import pytest

from helpers import finish_processes, train_processes
from jformer import checkpoint, coordination
from jformer.data import preparation


class FakeCoordination:
  """The coordination service's key-value store of one job, in a dict; a blocking get of a key not yet set fails
  (in these one-process tests, process 0's part has run before the other's)."""

  def __init__(self):
    self.store, self.events = {}, []

  def key_value_set(self, key, value):
    self.events.append(f"set {key}")
    self.store[key] = value

  def blocking_key_value_get(self, key, timeout_in_ms):
    self.events.append(f"waited for {key}")
    assert timeout_in_ms >= 3600 * 1000  # a preparation may take hours, a device collective would time out.
    return self.store[key]


@pytest.fixture
def job(monkeypatch):
  """Two processes, this one's index set by the test: `job(index)`; the coordination service faked."""
  fake = FakeCoordination()
  monkeypatch.setattr(coordination, "_client", lambda: fake)
  monkeypatch.setattr(jax, "process_count", lambda: 2)

  def as_process(index):
    monkeypatch.setattr(jax, "process_index", lambda: index)
    monkeypatch.setattr(coordination, "_CALLS", collections.Counter())  # each process counts its own calls.
    return fake

  return as_process


def test_process_0_prepares_first_then_the_others(job):
  fake = job(0)
  assert preparation.process_0_first(lambda: fake.events.append("prepare") or 7, "prepared") == 7
  job(1)  # the other process, after process 0: waits for its outcome through the store, then prepares (reuses).
  assert preparation.process_0_first(lambda: fake.events.append("prepare") or 7, "prepared") == 7
  assert fake.events == ["prepare", "set jformer/prepared/1", "waited for jformer/prepared/1", "prepare"]


def test_a_failed_preparation_stops_every_process_with_its_line(job):
  def fails():
    raise ValueError("no space left on the device of /data/tfds while preparing the data")

  job(0)
  with pytest.raises(ValueError, match="no space left on the device of /data/tfds"):
    preparation.process_0_first(fails, "prepared again")
  job(1)
  with pytest.raises(ValueError, match="^no space left on the device of /data/tfds while preparing the data$"):
    preparation.process_0_first(lambda: pytest.fail("prepared after process 0 failed"), "prepared again")


def test_one_process_prepares_without_waiting(monkeypatch):
  monkeypatch.setattr(coordination, "_client", lambda: pytest.fail("coordination service asked"))
  assert preparation.process_0_first(lambda: 7, "prepared") == 7


def test_folder_lock_makes_preparations_take_turns(tmp_path):
  folder = str(tmp_path / "tfds")
  events, entered = [], threading.Event()

  def first():
    with preparation.folder_lock(folder):
      events.append("first in")
      entered.set()
      time.sleep(0.3)
      events.append("first out")

  thread = threading.Thread(target=first)
  thread.start()
  entered.wait(10)
  with preparation.folder_lock(folder):  # another open file description: waits like another process would.
    events.append("second in")
  thread.join()
  assert events == ["first in", "first out", "second in"]
  assert os.path.exists(os.path.join(folder, preparation.LOCK_FILE))
  with preparation.folder_lock("gs://bucket/run/tfds"):  # not a local folder: no lock, nothing created.
    events.append("gs")
  assert not os.path.exists("gs:")
  (tmp_path / "file").write_text("")
  with preparation.folder_lock(str(tmp_path / "file" / "vocab")):  # cannot hold a lock file: runs unlocked.
    events.append("unlockable")
  assert events[-2:] == ["gs", "unlockable"]


def test_a_checkpoint_of_another_process_count_is_refused(tmp_path, monkeypatch):
  monkeypatch.setattr(coordination, "_client", FakeCoordination)  # process 0 verifies the step, "shares" it.
  iterator = iter(grain.MapDataset.range(10).to_iter_dataset())
  next(iterator)
  with checkpoint.Checkpointer(tmp_path / "ckpt", async_save=False) as ckpt:
    ckpt.save(1, {"w": np.zeros(2, np.float32)}, iterator, force=True)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ValueError, match=r"checkpoint 1 in .*ckpt holds the input positions of 1 processes, but "
                                         r"this run has 2: .* Resume with 1 processes, or start a new --workdir"):
      ckpt.restore({"w": np.zeros(2, np.float32)}, iterator)
    monkeypatch.undo()
    restored = iter(grain.MapDataset.range(10).to_iter_dataset())
    ckpt.restore({"w": np.zeros(2, np.float32)}, restored)
    assert next(restored) == 1


@pytest.mark.slow
def test_two_processes_on_one_fresh_workdir_prepare_once_train_and_resume(tiny_corpus, tmp_path):
  workdir = tmp_path / "run"
  results = finish_processes(train_processes(workdir, tiny_corpus, tmp_path, 2, **{"train.steps": 3}))
  for index, (code, out, err) in enumerate(results):
    assert code == 0, f"process {index} failed:\n{out}\n{err[-3000:]}"
  chief = results[0][1]
  # Each host tokenized its half of the 400 training pairs (ids 0, 2, ... on host 0); only process 0 prints.
  assert "training pairs" in chief and "host 0 of 2 (400 pairs in the split)" in chief
  assert "training pairs" not in results[1][1]
  calls = [(tmp_path / f"calls_2_{i}.txt") for i in range(2)]
  assert calls[0].read_text().split() == ["tfds_build", "train_tokenizer"] and not calls[1].exists()
  builds = list((workdir / "tfds" / "parallel_text").iterdir())
  assert len(builds) == 1 and [p.name for p in builds[0].iterdir()] == ["1.0.0"]  # no incomplete.* copy left.
  data_files = sorted(p.name for p in (workdir / "checkpoints" / "3" / "data").glob("process_*"))
  assert data_files == ["process_0-of-2.json", "process_1-of-2.json"]  # one input position per host.

  # One process cannot take over the data position of two.
  [(code, out, err)] = finish_processes(train_processes(workdir, tiny_corpus, tmp_path, 1, **{"train.steps": 6}))
  assert code != 0 and "holds the input positions of 2 processes, but this run has 1" in err, err[-3000:]
  assert not (tmp_path / "calls_1_0.txt").exists()  # nothing prepared again.

  # Two processes again resume it, each host from its own input position.
  results = finish_processes(train_processes(workdir, tiny_corpus, tmp_path, 2, **{"train.steps": 6}))
  for index, (code, out, err) in enumerate(results):
    assert code == 0, f"process {index} failed:\n{out}\n{err[-3000:]}"
  assert "resumed from step 3" in results[0][1] and "step      6/6" in results[0][1]
  assert calls[0].read_text().split() == ["tfds_build", "train_tokenizer"] and not calls[1].exists()
