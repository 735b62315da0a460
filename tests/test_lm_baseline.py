"""benchmarks/lm_baseline.py's verdict on a valid curve: how much it rose in the last quarter of the run."""

import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def lm_baseline(monkeypatch):
  monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
  import lm_baseline

  return lm_baseline


def test_a_curve_that_keeps_falling_has_no_late_rise(lm_baseline):
  curve = [(100, 2.5), (200, 2.2), (300, 2.1), (400, 2.05)]
  assert lm_baseline.late_rise(curve, 400) == pytest.approx(2.1 - 2.2)  # negative: still falling.


def test_a_curve_that_turns_up_at_the_end_has_a_late_rise(lm_baseline):
  curve = [(100, 2.5), (200, 1.98), (300, 1.99), (400, 2.11)]  # issue 30's LM demo on 0.8 MB of text.
  assert lm_baseline.late_rise(curve, 400) == pytest.approx(2.11 - 1.98)


def test_the_last_quarter_starts_at_three_quarters_of_the_steps(lm_baseline):
  curve = [(100, 3.0), (299, 2.0), (300, 2.4), (400, 2.2)]  # the best point before step 300 is 2.0.
  assert lm_baseline.late_rise(curve, 400) == pytest.approx(0.4)
  assert lm_baseline.late_rise([(100, 3.0)], 400) is None  # no point in the last quarter.
