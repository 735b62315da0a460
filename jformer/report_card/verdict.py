"""How a variant's figure compares with the baseline's, given how much each moved between the ways it was measured.

A figure is measured several ways: each seed of a training part (`--seeds`), each timed repetition of a step. Its
`Figure` keeps every sample; the card prints the mean. A variant is called better or worse than the baseline only
when the two ranges do not overlap (every sample of one beats every sample of the other); otherwise the difference
is "within noise". A figure measured one way (memory, or one seed) has a range of one point, so any difference
between the printed figures counts: the card says how many seeds a row ran.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class Figure:
  """One metric's samples, e.g. the test accuracy of each seed."""
  samples: tuple[float, ...]

  def __post_init__(self):
    if not self.samples:
      raise ValueError("a Figure needs at least one sample")

  @classmethod
  def of(cls, samples: Sequence[float] | float) -> Figure:
    return cls(tuple(float(x) for x in samples) if isinstance(samples, (list, tuple)) else (float(samples),))

  @property
  def mean(self) -> float:
    return statistics.fmean(self.samples)

  @property
  def low(self) -> float:
    return min(self.samples)

  @property
  def high(self) -> float:
    return max(self.samples)

  @property
  def spread(self) -> float:
    """Half the range: the mean is within `spread` of every sample."""
    return (self.high - self.low) / 2

  def overlaps(self, other: Figure) -> bool:
    return self.low <= other.high and other.low <= self.high


def compare(x: Figure, base: Figure, *, higher_is_better: bool, ratio: bool, digits: int) -> str:
  """The difference of the means ('+0.012') or their ratio ('1.56x'), then '(better)', '(worse)' or
  '(within noise)'; nothing after it when the printed figures are equal."""
  if ratio:
    if not base.mean:
      return "-"
    text = f"{x.mean / base.mean:.2f}x"
    same = text == "1.00x"
  else:
    text = f"{round(x.mean, digits) - round(base.mean, digits):+.{digits}f}"
    same = f"{x.mean:.{digits}f}" == f"{base.mean:.{digits}f}"
  if same:
    return text
  if x.overlaps(base):
    return f"{text} (within noise)"
  return f"{text} ({'better' if (x.mean > base.mean) == higher_is_better else 'worse'})"
