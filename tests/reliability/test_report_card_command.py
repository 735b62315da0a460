"""`jformer report-card` end to end on a tiny suite (injected in the command's process): it grades and writes the
card; SIGTERM stops it, in a training part or a measurement, with one line and exit 0 (no traceback), and the same
command resumes; a part reused from an earlier grading gives no ETA of the rest (neither zero nor another machine's
times)."""

import json
import re
import signal
import subprocess
import sys

import pytest
from helpers import REPO

# `jformer` with the suite cut to MQAR's first point for 20 steps and a small train step (the rest of the command
# as shipped: the cached dot_product card as the baseline, its seconds for the ETA).
TINY_CARD = """
import dataclasses, runpy, sys
from jformer.report_card import card, suite as suite_lib

full = suite_lib.default_suite()
short = {"train.steps": 20, "train.eval_every": 20, "train.log_every": 5, "train.checkpoint_every": 5,
         "data.eval_batch_size": 40}
parts = (dataclasses.replace(full.part("mqar_64x4"), overrides={**full.part("mqar_64x4").overrides, **short}),
         dataclasses.replace(full.part("train_step"), overrides={"data.max_length": 32, "data.batch_size": 8,
                                                                 "model.num_decoder_layers": 1}))
tiny = suite_lib.Suite(parts, tuple(m for m in full.metrics if m.part in {p.name for p in parts}))
card.default_suite = lambda: tiny
sys.argv[0] = "jformer"
runpy.run_module("jformer.main", run_name="__main__")
"""


def start(workdir) -> subprocess.Popen:
  return subprocess.Popen([sys.executable, "-c", TINY_CARD, "report-card", f"--workdir={workdir}"], cwd=REPO,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def sigterm_at(card: subprocess.Popen, pattern: str) -> tuple[str, str]:
  """Sends SIGTERM once a line of the card's output matches `pattern`; (its output, its stderr) once it ended."""
  seen = []
  for line in card.stdout:
    seen.append(line)
    if re.search(pattern, line):
      card.send_signal(signal.SIGTERM)
      break
  out, err = card.communicate(timeout=300)
  return "".join(seen) + out, err


@pytest.mark.slow  # three gradings of a tiny suite, two stopped: ~3 minutes on 2 busy cores.
def test_report_card_command_grades_stops_on_sigterm_resumes_and_reuses(tmp_path):
  workdir = tmp_path / "card"
  card = start(workdir)  # stopped in its training part: the run saves a step, the card says how to go on.
  out, err = sigterm_at(card, r"^step +5/")
  assert card.returncode == 0 and "Traceback" not in err, err
  assert out.splitlines()[-1] == (f"report card preempted in the report card's run {workdir / 'mqar_64x4' / 'seed_0'}; "
                                  "run the same command to resume (finished parts are reused)")

  card = start(workdir)  # the same command: the run resumes, the card is written.
  out, err = card.communicate(timeout=600)
  assert card.returncode == 0, err
  assert "resumed from step" in out and "| MQAR 64 tokens, 4 pairs: answer accuracy |" in out
  written = json.loads((workdir / "report_card.json").read_text())
  assert set(written["values"]) == {"mqar_64x4_accuracy", "train_step_ms", "train_step_temp_mib"}
  assert (workdir / "report_card.png").read_bytes()[:4] == b"\x89PNG"

  card = start(workdir)  # again: the run is reused; stopped in the measurement.
  out, err = sigterm_at(card, r"\[2/2\] .*: configs/")
  assert card.returncode == 0 and "Traceback" not in err, err
  assert out.splitlines()[-1] == ("report card preempted while grading; run the same command to resume (finished "
                                  "parts are reused)")
  [reused] = [line for line in out.splitlines() if "[1/2]" in line and " done in " in line]
  # No part ran here yet: no ETA from the baseline's seconds (another machine's) nor the reused part's (0 s).
  assert reused.endswith("so far, the time left is known once a part has run here"), reused
