"""Findings tied to their rows: what a results page says its table shows, checked against the table's JSON.

A finding is a JSON object in a results file's `findings` list:

    {"text": "linear attention needs a width that grows with the pairs: 0.347, 0.407, then 0.998 ...",
     "rows": ["linear", "dot_product"],          # the table rows it rests on, by their label
     "seeds": [0]}                                # the seeds those rows ran (one seed: the page says so)

The generator prints each finding with its rows and seeds. `problems(data)` lists what a finding claims that its
file does not hold: a row label that no row has, no seeds, or a number in its text that is neither a value of the
file (its findings, title and setup prose aside) nor computed from two values of the rows it cites, rounded as the
text writes it: a difference where the text writes a plain number, a ratio where it writes `1.9x`, a percentage
change (or a fraction) where it writes `14%`. Numbers checked: decimals, numbers with thousands separators (1,350),
integers of 100 and more that are not years, and percentages; text in `backticks` (config keys, commands) and sizes
written with a letter (18k, 0.5M) are not read. A file's `reduced` says why its run is smaller than its script's
defaults; the page says so in its first line. Standard library only.
"""

from __future__ import annotations

import itertools
import re

# A number as prose writes it: an optional sign, digits with optional thousands separators, decimals, an exponent,
# then an optional % or x. Not part of a word, a version or a section number (3.2.1), not an index (d_model 256 is
# read; GPT-2 is not).
NUMBER = re.compile(r"(?<![\w.\-/])([-+]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(e[-+]?\d+)?(%|x\b)?"
                    r"(?![\w.]*\d)(?![a-wyzA-Z])")
PROSE = ("findings", "setup", "title", "reduced")  # hand-written text: not a source of numbers.
YEARS = range(1990, 2031)


def row_label(row) -> str | None:
  """A table row's label: the first cell of a list row, `about` or `name` of a dict row."""
  if isinstance(row, list):
    return str(row[0]) if row else None
  if isinstance(row, dict):
    return row.get("about") or row.get("name") or row.get("variant")
  return None


def labelled_rows(data: dict) -> dict[str, object]:
  """{label: row} of a results file: its `rows` (list rows by their first cell, or by their first two where first
  cells repeat: 'bfloat16 1'), and its `teacher` (a surgery file's) as row 'teacher'."""
  listed = [r for r in data.get("rows", []) if row_label(r) is not None]
  labels = [row_label(r) for r in listed]
  if len(set(labels)) < len(labels):
    labels = [f"{r[0]} {r[1]}" if isinstance(r, list) and len(r) > 1 else row_label(r) for r in listed]
  rows = dict(zip(labels, listed))
  if "teacher" in data:
    rows["teacher"] = data["teacher"]
  return rows


def values(node, skip: tuple[str, ...] = ()) -> list[float]:
  """Every number in a JSON value: numbers, and numbers written in strings ('1,350', '0.999 (0.6; 21 s)', '@1024')."""
  if isinstance(node, bool) or node is None:
    return []
  if isinstance(node, (int, float)):
    return [float(node)]
  if isinstance(node, str):
    written = re.finditer(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:e[-+]?\d+)?", node)
    return [float(m.group(0).replace(",", "")) for m in written]
  if isinstance(node, dict):
    return [v for k, x in node.items() if k not in skip for v in values(x)]
  if isinstance(node, list):
    return [v for x in node for v in values(x)]
  return []


def derived(numbers: list[float], unit: str | None) -> list[float]:
  """What a finding may compute from its rows' values, by the unit it writes: a difference of two (no unit), a
  ratio ('x') or a percentage change ('%', or a fraction as a percentage)."""
  pairs = list(itertools.permutations(set(numbers), 2))
  if unit == "x":
    return [a / b for a, b in pairs if b]
  if unit == "%":
    return [100 * a for a in numbers] + [100 * abs(a - b) / abs(b) for a, b in pairs if b]
  return [a - b for a, b in pairs]


def claimed(text: str) -> list[tuple[str, float, int, str | None]]:
  """The numbers a finding's text states, as (as written, value, decimals, unit), outside `backticks`."""
  prose = re.sub(r"`[^`]*`", " ", text)
  found = []
  for m in NUMBER.finditer(prose):
    sign, whole, decimals, exponent, unit = m.groups()
    if not decimals and not exponent and "," not in whole and unit is None:
      number = int(whole)
      if number < 100 or number in YEARS:
        continue
    value = float(whole.replace(",", "") + (decimals or "") + (exponent or ""))
    places = len(decimals) - 1 if decimals and not exponent else 0
    found.append((m.group(0), value, places if not exponent else 12, unit))
  return found


def matches(value: float, places: int, candidates) -> bool:
  """Whether some candidate rounds to `value` at `places` decimals (a relative tolerance for exponents)."""
  if places >= 12:
    return any(abs(c - value) <= 1e-6 * abs(value) for c in candidates)
  half = 0.5 * 10 ** -places + 1e-9
  return any(abs(abs(c) - abs(value)) <= half for c in candidates)


def finding_problems(finding, rows: dict, sources: list[float]) -> list[str]:
  """What one finding claims that its file does not hold."""
  if not isinstance(finding, dict) or not isinstance(finding.get("text"), str):
    return [f"a finding is {{'text', 'rows', 'seeds'}}, got {finding!r:.80}"]
  head = finding["text"][:60]
  problems = []
  cited = finding.get("rows")
  if not cited or not isinstance(cited, list):
    problems.append(f"finding '{head}...' names no rows it rests on")
    cited = []
  missing = [r for r in cited if r not in rows]
  if missing:
    problems.append(f"finding '{head}...' cites rows {missing} that the table lacks (rows: {sorted(rows)})")
  seeds = finding.get("seeds")
  if not seeds or not isinstance(seeds, list):
    problems.append(f"finding '{head}...' names no seeds (a list, e.g. [0])")
  own = [v for r in cited if r in rows for v in values(rows[r])]
  for written, value, places, unit in claimed(finding["text"]):
    if (unit is None and matches(value, places, sources)) or matches(value, places, derived(own, unit)):
      continue
    problems.append(f"finding '{head}...' states {written}, which is neither in the file nor computed from its "
                    f"rows {cited}")
  return problems


def problems(data: dict) -> list[str]:
  """What the findings of one results file claim that the file does not hold."""
  rows = labelled_rows(data)
  sources = values(data, skip=PROSE)
  return [p for finding in data.get("findings", []) for p in finding_problems(finding, rows, sources)]


def render(findings: list[dict]) -> str:
  """The 'What it shows' list: each finding with the rows it rests on and their seeds."""
  lines = []
  for f in findings:
    seeds = f["seeds"]
    seed_text = f"one seed ({seeds[0]})" if len(seeds) == 1 else f"seeds {', '.join(str(s) for s in seeds)}"
    rows = ", ".join(f"`{r}`" for r in f["rows"])
    lines.append(f"- {f['text']} *(rows: {rows}; {seed_text})*")
  return "What it shows:\n" + "\n".join(lines)


def banner(data: dict) -> str:
  """The first line of a page whose run is reduced, '' otherwise."""
  return f"**Reduced run**: {data['reduced']}" if data.get("reduced") else ""
