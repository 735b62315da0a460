"""jformer/report_card/verdict.py: better or worse only beyond the spread of the seeds (or repetitions)."""

import pytest

from jformer.report_card.verdict import Figure, compare


def test_a_figure_is_the_mean_and_range_of_its_samples():
  figure = Figure.of([0.90, 0.96])
  assert figure.mean == pytest.approx(0.93) and (figure.low, figure.high) == (0.90, 0.96)
  assert figure.spread == pytest.approx(0.03)
  assert Figure.of(1.5).samples == (1.5,) and Figure.of(1.5).spread == 0
  with pytest.raises(ValueError, match="at least one sample"):
    Figure(())


@pytest.mark.parametrize("variant, baseline, want", [
    ([0.99, 0.97], [0.61, 0.65], "+0.350 (better)"),  # every seed above every seed of the baseline.
    ([0.60, 0.70], [0.61, 0.65], "+0.020 (within noise)"),  # the ranges overlap.
    ([0.50, 0.52], [0.61, 0.65], "-0.120 (worse)"),
    ([0.630, 0.630], [0.6299, 0.6301], "+0.000"),  # the printed figures are equal: no word.
])
def test_accuracy_is_better_or_worse_only_beyond_the_spread(variant, baseline, want):
  assert compare(Figure.of(variant), Figure.of(baseline), higher_is_better=True, ratio=False, digits=3) == want


def test_lower_is_better_and_ratios():
  bits = dict(higher_is_better=False, ratio=False, digits=3)
  assert compare(Figure.of([1.70, 1.71]), Figure.of([1.80, 1.82]), **bits) == "-0.105 (better)"
  time = dict(higher_is_better=False, ratio=True, digits=0)
  assert compare(Figure.of([150, 160]), Figure.of([100, 104]), **time) == "1.52x (worse)"
  assert compare(Figure.of([100, 110]), Figure.of([95, 105]), **time) == "1.05x (within noise)"
  assert compare(Figure.of(5.0), Figure.of(0.0), **time) == "-"
  assert compare(Figure.of(64.0), Figure.of(64.0), higher_is_better=False, ratio=True, digits=2) == "1.00x"
