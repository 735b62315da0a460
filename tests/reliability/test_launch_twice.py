"""Sweeps safe to launch twice: a launcher claims a point before it runs it (`launch.runs.claim`), so a second
launcher on the same root skips the points the first holds, runs each point at most once, and never touches (or
marks failed) a point it does not hold."""

import json
import subprocess
import sys
import time

import pytest
from helpers import REPO, tiny_overrides

from launch import runs


def test_a_claimed_point_is_refused_naming_its_holder(tmp_path):
  point = tmp_path / "point"
  with runs.claim(point):
    with pytest.raises(runs.Claimed, match=rf"held by launcher pid \d+ on .* \({point / runs.CLAIM_LOCK}\)"):
      with runs.claim(point):
        pass
  with runs.claim(point):  # released when its holder is done.
    pass


def test_on_an_object_store_a_claim_is_a_heartbeat_record(tmp_path, monkeypatch):
  """gs:// has no locks: the claim is a record with a heartbeat, taken when absent or stale, removed at the end."""
  monkeypatch.setattr(runs.paths, "is_local", lambda path: False)
  monkeypatch.setattr(runs, "CLAIM_SETTLE_S", 0.0)
  point, record = tmp_path / "point", tmp_path / "point" / runs.CLAIM_RECORD
  with runs.claim(point):
    held = json.loads(record.read_text())
    with pytest.raises(runs.Claimed, match=rf"held by launcher pid .* \(heartbeat {record}\)"):
      with runs.claim(point):
        pass
  assert not record.exists()
  record.write_text(json.dumps({"id": "a launcher that died", "heartbeat": time.time() - runs.LOST_AFTER_S - 1}))
  with runs.claim(point):  # a stale claim is taken over.
    assert json.loads(record.read_text())["id"] != "a launcher that died" != held["id"]


@pytest.mark.integration
def test_two_launchers_started_together_run_each_point_once(tiny_corpus, tmp_path):
  sweep_file = tmp_path / "twice.py"
  fixed = {**tiny_overrides(tiny_corpus), "train.steps": 4, "train.eval_every": 4, "train.checkpoint_every": 4}
  sweep_file.write_text(
      "from launch import sweep\n\n"
      f"BASE = {str(REPO / 'configs' / 'small.py')!r}\n"
      f"FIXED = {fixed!r}\n\n\n"
      "def get_sweep():\n"
      "  return sweep.axis('model.norm', ['post', 'pre'])\n")
  root = tmp_path / "runs"
  launch = [sys.executable, "-m", "launch", f"--sweep={sweep_file}", f"--root={root}"]
  launchers = [subprocess.Popen(launch, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for _ in range(2)]
  outputs = [launcher.communicate(timeout=600)[0] for launcher in launchers]
  assert [launcher.returncode for launcher in launchers] == [0, 0], outputs
  for point in ("norm=post", "norm=pre"):
    workdir = root / "twice" / point
    log = (workdir / runs.LOG).read_text()
    assert log.count("jformer.main train") == 1, log  # run once, by one launcher.
    assert runs.status(str(workdir), 4) == runs.DONE and runs.exit_code(str(workdir)) == 0
  said = "".join(outputs)
  assert said.count(": started") == 2, outputs
  assert said.count("run by another launcher") + said.count("by now, skipped") + said.count("skipped") >= 2, outputs

  results = {point: (root / "twice" / point / runs.RESULTS).read_bytes() for point in ("norm=post", "norm=pre")}
  again = subprocess.run(launch, cwd=REPO, capture_output=True, text=True, timeout=600)
  assert again.returncode == 0 and again.stdout.count("done (step 4") == 2, again.stdout + again.stderr
  assert {point: (root / "twice" / point / runs.RESULTS).read_bytes() for point in results} == results
