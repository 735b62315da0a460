"""jformer/report_card/leaderboard.py: the board's rows, one JSON each written as it is graded, finished rows
skipped."""

import json

from jformer import attention
from jformer.report_card import leaderboard
from jformer.report_card.suite import SUITE_VERSION

KERNELS = {"auto", "cudnn", "pallas_gpu", "splash", "xla"}  # dot_product computed by other kernels: not rows.


def test_the_board_holds_every_trainable_variant_the_plugins_and_the_shipped_patterns():
  rows = leaderboard.board()
  assert set(attention.available()) - KERNELS <= set(rows)
  assert rows["forgetting_transformer"]["imports"] == "tests/plugins/forgetting_transformer.py"
  assert rows["hybrid"]["model.layer_pattern"] == ("linear", "linear", "softmax")
  assert rows["local_global_5_1"]["model.layer_pattern"] == ("local",) * 5 + ("global",)
  assert list(rows)[0] == "dot_product" and not KERNELS & set(rows)


def test_a_rerun_skips_the_rows_graded_at_this_suite_version(tmp_path, monkeypatch):
  """Rows a and b exist (b of an older suite version): a rerun grades b and c only, each saved as it finishes with the
  baseline column beside it; a failure at c keeps b."""
  monkeypatch.setattr(leaderboard, "ROWS", tmp_path)
  monkeypatch.setattr(leaderboard, "board", lambda: {n: {"model.attention": n} for n in "abc"})
  card = lambda name, version=SUITE_VERSION: {"variant": name, "suite_version": version, "values": {}}
  (tmp_path / "a.json").write_text(json.dumps(card("a")))
  (tmp_path / "b.json").write_text(json.dumps(card("b", SUITE_VERSION - 1)))
  assert leaderboard.missing() == ["b", "c"]
  graded, said = [], []

  def grade(overrides):
    name = overrides["model.attention"]
    graded.append(name)
    if name == "c":
      raise RuntimeError("stopped")
    return card(name), {"variant": "dot_product", "values": {}}

  try:
    leaderboard.build(grade, say=said.append)
  except RuntimeError:
    pass
  assert graded == ["b", "c"] and said[0].startswith("leaderboard: a: graded at suite version")
  saved = json.loads((tmp_path / "b.json").read_text())
  assert saved["suite_version"] == SUITE_VERSION and saved["baseline"]["variant"] == "dot_product"
  assert json.loads((tmp_path / "board.json").read_text())["rows"] == {n: {"model.attention": n} for n in "abc"}
  assert leaderboard.missing() == ["c"]
  assert "not graded yet: c" in leaderboard.ranking()


def test_the_committed_board_index_is_current():
  """docs/results/report_cards/board.json (which the results page reads without importing jformer) lists the board's
  rows and the suite's metrics as the code defines them: rerun `jformer report-card --leaderboard` (it rewrites it
  first) after changing either."""
  assert json.loads((leaderboard.ROWS / "board.json").read_text()) == json.loads(json.dumps(leaderboard.index()))


def test_a_saved_row_compares_each_metric_beyond_the_seeds_spread(tmp_path, monkeypatch):
  monkeypatch.setattr(leaderboard, "ROWS", tmp_path)
  card = {"variant": "v", "values": {"mqar_64x4_accuracy": 0.5}, "samples": {"mqar_64x4_accuracy": [0.4, 0.6]}}
  base = {"variant": "dot_product", "values": {"mqar_64x4_accuracy": 0.99},
          "samples": {"mqar_64x4_accuracy": [0.98, 0.995]}}
  saved = json.loads(leaderboard.save("v", card, base).read_text())
  assert saved["comparison"]["mqar_64x4_accuracy"] == "-0.488 (worse)"
  close = {**card, "samples": {"mqar_64x4_accuracy": [0.4, 0.99]}}
  saved = json.loads(leaderboard.save("v", close, base).read_text())
  assert "(within noise)" in saved["comparison"]["mqar_64x4_accuracy"]
