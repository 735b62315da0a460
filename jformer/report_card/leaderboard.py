"""`jformer report-card --leaderboard`: the suite graded for every row of the board, one JSON file per row.

Each row is written to docs/results/report_cards/<row>.json the moment its card is graded (the card's own JSON:
machine, commit, date, seeds, suite version, wall time, command); a rerun skips the rows already graded at the current
SUITE_VERSION and grades the rest, so the board is built over as many sittings as it takes. Time and memory are
ratios to dot_product measured in the same command and everything else is at fixed steps, so rows graded on
different machines compare.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Callable

from jformer import config as config_lib
from jformer.report_card.suite import REPO, SUITE_VERSION

ROWS = REPO / "docs" / "results" / "report_cards"
PLUGINS = "tests/plugins"


def _pattern(config_file: str) -> dict[str, Any]:
  """The per-layer kinds and pattern of a shipped config (configs/lm_hybrid.py, configs/lm_local_global.py)."""
  model = config_lib.read(REPO / "configs" / config_file).model
  return {"model.layer_kinds": model.layer_kinds.to_dict(), "model.layer_pattern": tuple(model.layer_pattern)}


def board() -> dict[str, dict[str, Any]]:
  """{row name: the variant's overrides}: every built-in attention variant that trains (the kernels compute
  dot_product and are not rows), the flex plug-ins of tests/plugins/ (FoX, learned ALiBi as a score_mod), and the
  shipped layer patterns."""
  rows = {name: {"model.attention": name} for name in (
      "dot_product", "chunked", "local", "linear", "additive", "general", "cosine", "dot_product_unscaled", "hedgehog")}
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


def save(name: str, card: dict) -> pathlib.Path:
  """Writes row `name`'s card (at once: a later row's failure loses nothing)."""
  ROWS.mkdir(parents=True, exist_ok=True)
  path = row_path(name)
  path.write_text(json.dumps(card, indent=1) + "\n")
  return path


def build(grade: Callable[[dict[str, Any]], tuple[dict, dict]], say: Callable[[str], None] = print) -> list[str]:
  """Grades every row not yet graded at this suite version, in board order: `grade(overrides)` gives (the row's
  card, the baseline's column beside it), saved together at once. Returns the rows graded now."""
  graded_now = []
  for name, overrides in board().items():
    if graded(name) is not None:
      say(f"leaderboard: {name}: graded at suite version {SUITE_VERSION} ({row_path(name)}), skipped")
      continue
    card, baseline = grade(overrides)
    say(f"leaderboard: {name}: written {save(name, {**card, 'baseline': baseline})}")
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
