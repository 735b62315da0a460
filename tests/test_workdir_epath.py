"""Workdirs anywhere: a run on `--workdir=gs://bucket/run` keeps every file in the bucket (through etils.epath), never
in a local folder `./gs:/bucket/run`.

There is no network here, so Cloud Storage is a stand-in: `fake_gcs` gives epath a backend for gs:// that keeps
`gs://<bucket>/<key>` in `<tmp>/<bucket>/<key>`. Everything jformer reads or writes through epath (config, vocab,
tfds metadata, results, TensorBoard events, Orbax's checkpoint metadata and commit files, grain's iterator state,
the launch files) goes through it with the gs:// path. Two libraries bring their own Cloud Storage clients that
epath does not serve, and the fixture points them at the same folder: Orbax's array files (TensorStore's `gcs`
driver) and tfds's ArrayRecord files (ArrayRecord's C++ reader and writer). What is NOT tested: those clients and
gcsfs (epath's real gs:// backend) against real Cloud Storage.
"""

import json
import os
import pathlib
import sys
import time

import jax
import numpy as np
import pytest
from array_record.python import array_record_module
from etils import epath
from etils.epath import backend as epath_backend
from etils.epath import gpath
from orbax.checkpoint._src.path import gcs_utils

from helpers import tiny_overrides
from jformer import checkpoint, main, paths
from jformer.train.progress import Progress
from launch import events, report, runs
from launch import sweep as launch_sweep
from launch.backends import slurm, tpu_vm


class LocalBucketBackend(epath_backend.Backend):
  """An epath backend for gs:// paths that keeps `gs://<bucket>/<key>` in the local file `<root>/<bucket>/<key>`."""

  def __init__(self, root: pathlib.Path):
    self.root = str(root)
    self.seen = set()  # every gs:// path asked for.
    self.os = epath_backend.os_backend

  def local(self, path) -> str:
    path = os.fspath(path)
    assert path.startswith("gs://"), f"the gs:// backend got a local path {path}"
    self.seen.add(path)
    return os.path.join(self.root, path.removeprefix("gs://"))

  def uri(self, local_path) -> str:
    return "gs://" + os.path.relpath(os.fspath(local_path), self.root)

  def open(self, path, mode):
    return self.os.open(self.local(path), mode)

  def exists(self, path):
    return self.os.exists(self.local(path))

  def isdir(self, path):
    return self.os.isdir(self.local(path))

  def listdir(self, path):
    return self.os.listdir(self.local(path))

  def glob(self, path):
    return [self.uri(p) for p in self.os.glob(self.local(path))]

  def walk(self, top, *, top_down=True, on_error=None):
    for root, dirs, files in self.os.walk(self.local(top), top_down=top_down, on_error=on_error):
      yield self.uri(root), dirs, files

  def makedirs(self, path, *, exist_ok=False, mode=None):
    return self.os.makedirs(self.local(path), exist_ok=exist_ok, mode=mode)

  def mkdir(self, path, *, exist_ok=False, mode=None):
    return self.os.mkdir(self.local(path), exist_ok=exist_ok, mode=mode)

  def rmtree(self, path):
    return self.os.rmtree(self.local(path))

  def remove(self, path):
    return self.os.remove(self.local(path))

  def rename(self, path, dst):
    return self.os.rename(self.local(path), self.local(dst))

  def replace(self, path, dst):
    return self.os.replace(self.local(path), self.local(dst))

  def copy(self, path, dst, overwrite):
    return self.os.copy(self.local(path), self.local(dst), overwrite=overwrite)

  def stat(self, path):
    return self.os.stat(self.local(path))


@pytest.fixture
def fake_gcs(tmp_path, monkeypatch) -> LocalBucketBackend:
  """gs:// served from `tmp_path/store` (see the module docstring); the working directory is an empty `tmp_path/cwd`."""
  (tmp_path / "store").mkdir()
  (tmp_path / "cwd").mkdir()
  monkeypatch.chdir(tmp_path / "cwd")
  store = LocalBucketBackend(tmp_path / "store")
  monkeypatch.setitem(gpath._PREFIX_TO_BACKEND, "gs", store)
  monkeypatch.setattr(gpath, "_is_tf_installed", lambda: False)  # epath would take TensorFlow's gfile.
  # Orbax asks the bucket (google-cloud-storage) whether it has a hierarchical namespace: this one is flat.
  monkeypatch.setattr(gcs_utils, "is_hierarchical_namespace_enabled", lambda path: False)
  # TensorStore (Orbax's arrays): its `file` driver on the same folder instead of its `gcs` driver.
  monkeypatch.setattr(gcs_utils, "get_kvstore_for_gcs", lambda path: {"driver": "file", "path": store.local(path)})
  # ArrayRecord (tfds's prepared data): its reader and writer on the same folder instead of its Cloud Storage client.
  for name in ("ArrayRecordReader", "ArrayRecordWriter"):
    cls = getattr(array_record_module, name)
    monkeypatch.setattr(array_record_module, name,
                        lambda path, *args, cls=cls, **kwargs: cls(
                            store.local(path) if os.fspath(path).startswith("gs://") else path, *args, **kwargs))
  return store


def test_the_fake_store_keeps_gs_paths_in_its_folder(fake_gcs, tmp_path):
  """The stand-in itself: a gs:// file lands in <store>/<bucket>/<key>, globs come back as gs:// paths."""
  path = epath.Path("gs://bucket/a/b.txt")
  paths.write_atomically(path, "hello")
  assert (tmp_path / "store" / "bucket" / "a" / "b.txt").read_text() == "hello"
  assert [os.fspath(p) for p in epath.Path("gs://bucket/a").glob("*")] == ["gs://bucket/a/b.txt"]
  assert os.listdir(tmp_path / "store" / "bucket" / "a") == ["b.txt"]  # no temporary file left.
  assert os.listdir(tmp_path / "cwd") == []


def test_absolute_keeps_uris_and_anchors_local_paths(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert os.fspath(paths.absolute("gs://bucket/run")) == "gs://bucket/run"
  assert os.fspath(paths.absolute("runs/demo")) == str(tmp_path / "runs" / "demo")
  assert paths.is_local("runs/demo") and paths.is_local(tmp_path) and not paths.is_local("gs://bucket/run")


def _train(repo_root, corpus, workdir, **extra):
  overrides = tiny_overrides(corpus, **{"train.average_checkpoints": 0, **extra})
  main.main(["train", f"--config={repo_root / 'configs' / 'small.py'}", f"--workdir={workdir}",
             *[f"--config.{key}={value}" for key, value in overrides.items()]])


def _params(workdir, step):
  with checkpoint.Checkpointer(checkpoint.checkpoints_dir(workdir), read_only=True) as ckpt:
    return ckpt.restore_params(step)


@pytest.mark.integration
def test_train_resume_translate_average_on_a_gs_workdir(fake_gcs, repo_root, tiny_corpus, tmp_path, capsys):
  """`jformer train --workdir=gs://bucket/run` for 3 steps, then to 6 on the same workdir (it restores the state
  and the data position of step 3 from the bucket), then again (the finished run is read and left as it is);
  translate and average-checkpoints read the run from there; nothing lands in the working directory."""
  _train(repo_root, tiny_corpus, "gs://bucket/run", **{"train.steps": 3})
  _train(repo_root, tiny_corpus, "gs://bucket/run")
  out = capsys.readouterr().out
  assert "resumed from step 3 (gs://bucket/run/checkpoints)" in out and "results in gs://bucket/run/results.json" in out
  _train(repo_root, tiny_corpus, "gs://bucket/run")
  assert "gs://bucket/run holds a finished run: step 6" in capsys.readouterr().out

  run = tmp_path / "store" / "bucket" / "run"
  assert json.loads((run / "config.json").read_text())["model"]["d_model"] == 32
  assert json.loads((run / "results.json").read_text())["step"] == 6
  assert (run / "vocab" / "spm_300.model").stat().st_size > 0
  assert list((run / "tfds" / "parallel_text").glob("*/1.0.0/*.array_record*"))
  assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["3", "6"]
  assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 2  # one per `jformer train` that trained.
  curves = events.scalars("gs://bucket/run/tensorboard")
  assert [step for step, _ in curves["train/loss"]] == [2, 3, 4, 6] and [s for s, _ in curves["eval/loss"]] == [3, 6]

  (tmp_path / "store" / "bucket" / "source.txt").write_text("Save the file before closing.\n\nOpen a file.\n")
  main.main(["translate", "--workdir=gs://bucket/run", "--input=gs://bucket/source.txt",
             "--output=gs://bucket/target.txt"])
  assert len((tmp_path / "store" / "bucket" / "target.txt").read_text().split("\n")) == 4
  main.main(["average-checkpoints", "--workdir=gs://bucket/run", "--last=2"])
  averaged = checkpoint.load_params("gs://bucket/run/averaged")
  for mean, three, six in zip(*(jax.tree.leaves(p) for p in (averaged, _params("gs://bucket/run", 3),
                                                              _params("gs://bucket/run", 6))), strict=True):
    np.testing.assert_allclose(mean, (three + six) / 2, atol=1e-6)

  assert os.listdir(tmp_path / "cwd") == []  # nothing under ./gs:/ (or anywhere else in the working directory),
  assert not os.path.exists("/gs")  # nor under /gs/ (epath's inner form of gs:// paths).
  assert "gs://bucket/run/config.json" in fake_gcs.seen and "gs://bucket/run/vocab/spm_300.model" in fake_gcs.seen


@pytest.mark.slow
def test_a_run_resumed_from_gs_equals_an_uninterrupted_local_run(fake_gcs, repo_root, tiny_corpus, tmp_path, capsys):
  """3 steps on gs://, resumed to 6: the parameters of 6 uninterrupted local steps; visualize-attention on it."""
  _train(repo_root, tiny_corpus, "gs://bucket/run", **{"train.steps": 3})
  _train(repo_root, tiny_corpus, "gs://bucket/run")
  assert "resumed from step 3 (gs://bucket/run/checkpoints)" in capsys.readouterr().out
  _train(repo_root, tiny_corpus, tmp_path / "local")
  for a, b in zip(jax.tree.leaves(_params("gs://bucket/run", 6)), jax.tree.leaves(_params(tmp_path / "local", 6)),
                  strict=True):
    np.testing.assert_allclose(a, b, atol=1e-6)
  main.main(["visualize-attention", "--workdir=gs://bucket/run", "--text=Save the file."])
  run = tmp_path / "store" / "bucket" / "run"
  assert {"attention.npz", "cross_layer0.png"} <= {p.name for p in (run / "attention").iterdir()}
  assert os.listdir(tmp_path / "cwd") == []


def test_sweep_on_a_gs_root(fake_gcs, tmp_path):
  """A sweep point's launch.log, exit_code, results.json and TensorBoard curves in the bucket: its status and the
  sweep report read back from there; tpu_vm copies nothing, slurm refuses the root (its shell writes the logs)."""
  point = launch_sweep.Point("norm=pre", {"model.norm": "pre"}, 6)
  tiny = launch_sweep.Sweep("tiny", "configs/small.py", {}, (point,))
  workdir = tiny.workdir("gs://bucket/runs", point)
  stored = tmp_path / "store" / "bucket" / "runs" / "tiny" / "norm=pre"
  assert workdir == "gs://bucket/runs/tiny/norm=pre" and runs.status(workdir, steps=6) == runs.NOT_STARTED
  assert runs.run_logged([[sys.executable, "-c", "print('hello from the point')"]], workdir) == 0
  assert "hello from the point" in (stored / runs.LOG).read_text() and runs.exit_code(workdir) == 0
  assert runs.status(workdir, steps=6) == runs.STOPPED
  assert runs.run_logged([[sys.executable, "-c", "raise SystemExit(3)"]], workdir) == 3
  log = (stored / runs.LOG).read_text()
  assert "hello from the point" in log and "=== exit status 3" in log and runs.status(workdir, 6) == runs.FAILED

  progress = Progress(workdir, total_steps=6, start_step=0)  # TensorBoard events through epath.
  progress.scalars(6, {"loss": 1.25}, prefix="train/")
  progress.close()
  paths.write_atomically(f"{workdir}/{runs.RESULTS}", json.dumps({"step": 6, "train_loss": 1.25, "bleu": 1.5}))
  assert runs.status(workdir, steps=6) == runs.DONE and runs.read_results(workdir)["bleu"] == 1.5
  assert events.scalars(f"{workdir}/tensorboard") == {"train/loss": [(6, 1.25)]}
  table, written = report.write(tiny, "gs://bucket/runs")
  assert "| norm=pre | pre | done | 6 | 1.2500 |" in table
  assert written["report.md"] == "gs://bucket/runs/tiny/report.md"
  assert table in (stored.parent / "report.md").read_text() and (stored.parent / "curves.png").stat().st_size > 0

  settings = tpu_vm.Settings(name="jf", zone="z", accelerator_type="v4-8", repo="r", ref="c")
  rendered = tpu_vm.render(tiny, "gs://bucket/runs", settings)
  assert "--workdir=gs://bucket/runs/tiny/norm=pre" in rendered and " scp " not in rendered
  assert " scp " in tpu_vm.render(tiny, "runs", settings)  # a local root: results copied from worker 0.
  with pytest.raises(launch_sweep.SweepError, match="give a folder every node mounts"):
    slurm.run(tiny, "gs://bucket/runs", slurm.Settings())
  assert os.listdir(tmp_path / "cwd") == []


def test_a_gs_workdir_is_claimed_by_one_train_job(fake_gcs, monkeypatch):
  """Object stores have no locks: a second `jformer train` on a gs:// workdir is refused by the first's heartbeat
  claim, and a claim left by a job that died (heartbeat too old) is taken over."""
  from jformer.train import workdir_lock

  monkeypatch.setattr(workdir_lock, "CLAIM_SETTLE_S", 0.0)
  workdir = "gs://bucket/claimed"
  record = epath.Path(workdir) / workdir_lock.CLAIM_FILE
  with workdir_lock.hold(workdir):
    assert json.loads(record.read_text())["holder"].startswith(f"pid {os.getpid()} on ")
    with pytest.raises(workdir_lock.WorkdirInUseError, match=rf"{workdir} is in use by another `jformer train` "
                                                             rf"\(held by pid {os.getpid()} on .*heartbeat"):
      with workdir_lock.hold(workdir):
        pass
  assert not record.exists()
  record.write_text(json.dumps({"holder": "a job that died", "heartbeat": time.time() - 3600}))
  with workdir_lock.hold(workdir):
    assert json.loads(record.read_text())["holder"] != "a job that died"
