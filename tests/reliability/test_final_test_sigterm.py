"""SIGTERM during a run's final test (its BLEU decode): the run stops at once (not at the end of the decode, which
on a real test set outlasts a preemption's grace period), exit 0, with its trained steps saved; the rerun trains
nothing and runs the test."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import REPO, SMALL, tiny_overrides

from jformer.train.preemption import Preempted, stop_at_once


def test_sigterm_inside_stop_at_once_raises_at_the_next_python_line_not_at_the_blocks_end():
  """The decode is a Python loop over device calls: SIGTERM raises between two of them, not after the last."""
  done = []
  previous = signal.getsignal(signal.SIGTERM)
  with pytest.raises(Preempted, match="during the final test"):
    with stop_at_once("during the final test"):
      for batch in range(100):
        done.append(batch)
        if batch == 3:
          os.kill(os.getpid(), signal.SIGTERM)
  assert done[:4] == [0, 1, 2, 3] and len(done) < 100
  assert signal.getsignal(signal.SIGTERM) is previous


@pytest.mark.integration  # a tiny run stopped in its final test, and its rerun: ~60 s on 2 busy cores.
def test_sigterm_during_the_final_test_stops_it_at_once_and_the_rerun_tests(tiny_corpus, tmp_path):
  workdir = tmp_path / "run"
  # Beam search over the whole test split (24 sentences): tens of seconds of decoding here.
  args = [sys.executable, "-m", "jformer.main", "train", f"--config={SMALL}", f"--workdir={workdir}",
          *(f"--config.{k}={v}" for k, v in tiny_overrides(tiny_corpus, **{
              "train.steps": 2, "train.eval_every": 2, "train.checkpoint_every": 2, "decode.method": "beam",
              "decode.max_extra_length": 20}).items())]
  run = subprocess.Popen(args, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  seen = []
  for line in run.stdout:
    seen.append(line)
    if line.startswith("final test of step 2"):
      time.sleep(1.0)  # into the decode.
      run.send_signal(signal.SIGTERM)
      break
  out, err = run.communicate(timeout=300)
  out = "".join(seen) + out
  assert run.returncode == 0, err
  # Stopped inside the decode: the BLEU line follows its end at once, and a stop at the end of the phase would
  # have printed it (the stop between two device calls: the test above).
  assert "preempted during the final test" in out and "BLEU" not in out and "Traceback" not in err
  results = json.loads((workdir / "results.json").read_text())
  assert results["step"] == 2 and results["finished"] is False
  assert (workdir / "checkpoints" / "2").is_dir()

  rerun = subprocess.run(args, cwd=REPO, text=True, capture_output=True, timeout=600)
  assert rerun.returncode == 0, rerun.stderr
  assert "resumed from step 2" in rerun.stdout and "BLEU" in rerun.stdout
  assert json.loads((workdir / "results.json").read_text())["finished"] is True
