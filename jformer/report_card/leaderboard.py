"""`jformer report-card --leaderboard`: the suite graded for every row of the board, one JSON file per row.

Each row is written to docs/results/report_cards/<row>.json the moment its card is graded (the card's own JSON:
machine, commit, date, seeds, suite version, wall time, command; the baseline column graded beside it and the
comparison of each metric); a rerun skips the rows already graded at the current SUITE_VERSION and grades the rest, so
the board is built over as many sittings as it takes. Time and memory are ratios to dot_product measured in the same
command and everything else is at fixed steps, so rows graded on different machines compare.

`board.json` beside the rows says which rows the board has and what each metric is, so that
docs/results/generate.py (standard library only) renders report_cards.md from the rows that exist and names the
missing ones; tests/test_report_card_leaderboard.py checks it is current.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any, Callable

from jformer import attention
from jformer import config as config_lib
from jformer.report_card.card import card_alone, comparison, samples_of
from jformer.report_card.suite import REPO, ROWS, SUITE_VERSION, default_suite
PLUGINS = "tests/plugins"


def _pattern(config_file: str) -> dict[str, Any]:
  """The per-layer kinds and pattern of a shipped config (configs/lm_hybrid.py, configs/lm_local_global.py)."""
  model = config_lib.read(REPO / "configs" / config_file).model
  return {"model.layer_kinds": model.layer_kinds.to_dict(), "model.layer_pattern": tuple(model.layer_pattern)}


# Variants that compute dot_product's attention another way: not rows of their own (the library kernels, which
# declare their platforms, are not rows either).
SAME_AS_DOT_PRODUCT = ("auto", "xla")
# The rows graded first (a partial board shows them): the baseline, the classics the others are read against; then
# the other variants by name.
FIRST = ("dot_product", "linear", "local", "chunked", "additive", "general", "cosine", "dot_product_unscaled",
         "hedgehog")


def built_in_variants() -> list[str]:
  """The attention variants registered by jformer itself (not by a plug-in file) that compute their own attention
  (`SAME_AS_DOT_PRODUCT` and the platform kernels left out), FIRST first."""
  package = REPO / "jformer"
  built_in = lambda name: package in pathlib.Path(attention.REGISTRY.origin(name).rsplit(":", 1)[0]).resolve().parents
  names = [name for name in attention.available() if built_in(name) and name not in SAME_AS_DOT_PRODUCT
           and attention.get(name).platforms is None]
  return sorted(names, key=lambda name: (FIRST.index(name) if name in FIRST else len(FIRST), name))


def board() -> dict[str, dict[str, Any]]:
  """{row name: the variant's overrides}: every built-in attention variant that computes its own attention, the
  flex plug-ins of tests/plugins/ (FoX, learned ALiBi as a score_mod), and the shipped layer patterns."""
  rows = {name: {"model.attention": name} for name in built_in_variants()}
  for plugin in ("forgetting_transformer", "learned_alibi"):
    rows[plugin] = {"imports": f"{PLUGINS}/{plugin}.py", "model.attention": plugin}
  rows["hybrid"] = _pattern("lm_hybrid.py")
  rows["local_global_5_1"] = _pattern("lm_local_global.py")
  return rows


def row_path(name: str) -> pathlib.Path:
  return ROWS / f"{name}.json"


def graded(name: str) -> dict | None:
  """Row `name`'s card if it was graded at the current SUITE_VERSION, else None."""
  path = row_path(name)
  card = json.loads(path.read_text()) if path.exists() else None
  return card if card and card.get("suite_version") == SUITE_VERSION else None


def missing() -> list[str]:
  """The board's rows not yet graded at the current SUITE_VERSION, in board order."""
  return [name for name in board() if graded(name) is None]


def index() -> dict[str, Any]:
  """What board.json holds: the suite version, every row's overrides (in board order) and the suite's metrics."""
  return {"suite_version": SUITE_VERSION,
          "rows": {name: {k: list(v) if isinstance(v, tuple) else v for k, v in overrides.items()}
                   for name, overrides in board().items()},
          "metrics": [dataclasses.asdict(metric) for metric in default_suite().metrics]}


def write_index() -> pathlib.Path:
  ROWS.mkdir(parents=True, exist_ok=True)
  path = ROWS / "board.json"
  path.write_text(json.dumps(index(), indent=1) + "\n")
  return path


def save(name: str, card: dict, baseline: dict, wall_seconds: float | None = None) -> pathlib.Path:
  """Writes row `name`'s card with the baseline column it was graded beside, each metric's comparison with it
  (`card.comparison`: '(better)' or '(worse)' only beyond the seeds' spread) and the wall seconds of its grading
  (the baseline's measurements included), at once: a later row's failure loses nothing."""
  ROWS.mkdir(parents=True, exist_ok=True)
  compared = {m.name: comparison(m, samples_of(card, m.name), samples_of(baseline, m.name))
              for m in default_suite().metrics}
  path = row_path(name)
  baseline = card_alone(baseline)
  row = {**card, "baseline": baseline, "comparison": compared}
  if wall_seconds is not None:
    row["wall_seconds"] = round(wall_seconds, 1)
  path.write_text(json.dumps(row, indent=1) + "\n")
  return path


def build(grade: Callable[[dict[str, Any]], tuple[dict, dict]], say: Callable[[str], None] = print) -> list[str]:
  """Grades every row not yet graded at this suite version, in board order: `grade(overrides)` gives (the row's
  card, the baseline's column beside it), saved together at once. Returns the rows graded now."""
  graded_now = []
  write_index()
  for name, overrides in board().items():
    if graded(name) is not None:
      say(f"leaderboard: {name}: graded at suite version {SUITE_VERSION} ({row_path(name)}), skipped")
      continue
    start = time.perf_counter()
    card, baseline = grade(overrides)
    say(f"leaderboard: {name}: written {save(name, card, baseline, time.perf_counter() - start)}")
    graded_now.append(name)
  return graded_now


def ranking(extra: dict | None = None, metric: str = "lm_bits_per_byte_256") -> str:
  """The graded rows (and `extra`, a card graded now, marked) ordered by `metric` (lower is better), one line each,
  then the rows still missing."""
  rows = [(name, card) for name in board() if (card := graded(name)) is not None]
  if extra is not None:
    rows.append((f"**{extra['variant']}** (yours)", extra))
  rows.sort(key=lambda row: row[1]["values"].get(metric, float("inf")))
  lines = [f"| rank | row | {metric} |", "|---:|---|---:|"]
  lines += [f"| {i} | {name} | {card['values'].get(metric, float('nan')):.3f} |" for i, (name, card) in
            enumerate(rows, 1)]
  left = missing()
  return "\n".join(lines + ([f"\nnot graded yet: {', '.join(left)}"] if left else []))
