"""docs/results/ is generated (`python docs/results/generate.py`): the committed pages equal a fresh generation, the
support matrix names evidence that exists, and every benchmark result says when, on what machine, at which commit
and by what command it was measured. Standard library only (no JAX import): fast."""

import datetime
import importlib.util
import json
import shutil
import pathlib
import re
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
PAGES = REPO / "docs" / "results"
FIX = "run `python docs/results/generate.py` and commit the pages"


def load(name: str, path: pathlib.Path):
  """The module at `path` (not a package module), under `name`."""
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # dataclasses look their module up while the class is made.
  spec.loader.exec_module(module)
  return module


generate = load("docs_results_generate", PAGES / "generate.py")
RESULTS = sorted((REPO / "benchmarks" / "results").glob("*.json"))


def test_committed_pages_equal_a_fresh_generation(tmp_path):
  assert generate.main([f"--out={tmp_path}"]) == 0
  fresh = {p.name: p.read_text() for p in tmp_path.iterdir()}
  committed = {p.name: p.read_text() for p in PAGES.glob("*.md")}
  for name, text in sorted(fresh.items()):
    assert name in committed, f"docs/results/{name} is missing: {FIX}"
    assert committed[name] == text, f"docs/results/{name} is stale: {FIX}"
  extra = sorted(set(committed) - set(fresh))
  assert not extra, f"docs/results/ has pages the generator does not make: {extra}; delete them or add them to PAGES"


def test_check_names_the_stale_page_and_writes_nothing(tmp_path, capsys):
  assert generate.main([f"--out={tmp_path}"]) == 0
  (tmp_path / "decode.md").write_text("edited by hand\n")
  (tmp_path / "memory.md").unlink()
  capsys.readouterr()
  assert generate.main(["--check", f"--out={tmp_path}"]) == 1
  captured = capsys.readouterr()
  assert captured.out.splitlines() == [f"stale: {tmp_path / 'decode.md'}", f"stale: {tmp_path / 'memory.md'}"]
  assert "python docs/results/generate.py" in captured.err
  assert (tmp_path / "decode.md").read_text() == "edited by hand\n" and not (tmp_path / "memory.md").exists()


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_result_records_date_commit_machine_and_command(path):
  data = json.loads(path.read_text())
  assert data.get("benchmark") in {page.kind for page in generate.PAGES}, f"{path.name}: no page renders it"
  machine = data.get("machine")
  assert isinstance(machine, dict), f"{path.name}: no machine block"
  for key in ("date", "commit", "command", "cpu", "cpus", "backend", "device", "jax", "flax"):
    assert machine.get(key) not in (None, ""), f"{path.name}: machine.{key} is missing"
  datetime.datetime.fromisoformat(machine["date"])
  assert re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?|unknown", machine["commit"]), machine["commit"]
  script = "jformer launch --sweep=configs/sweeps/" if data["benchmark"] == "sweep" else "benchmarks/"
  assert machine["command"].startswith(script) and (".py" in machine["command"] or machine["command"].endswith(".sh"))
  assert machine.get("commit_is", "measured") in ("measured", "recorded")


def evidence_exists(evidence: str) -> bool:
  """`path` or `path::test_name` (a `def test_name` in that file)."""
  path, _, test = evidence.partition("::")
  file = REPO / path
  return file.is_file() and (not test or re.search(rf"^\s*def {re.escape(test)}\(", file.read_text(), re.M))


def test_support_matrix_cells_name_evidence_that_exists():
  support = json.loads((PAGES / "support.json").read_text())
  assert support["rows"], "support.json has no rows"
  backends = {"CPU": "cpu", "GPU": "gpu", "TPU": "tpu"}
  for row in support["rows"]:
    for platform in generate.PLATFORMS:
      where = f"support.json: {row['feature']} / {platform}"
      cell = row[platform]
      assert cell["status"] in generate.STATUSES, f"{where}: unknown status {cell['status']!r}"
      evidence = cell.get("evidence", [])
      for item in evidence:
        assert evidence_exists(item), f"{where}: {item} does not exist"
      for path in re.findall(r"`((?:tests|benchmarks|\.ci)/[^`\s]+)`", cell.get("note", "")):
        assert evidence_exists(path), f"{where}: the note names {path}, which does not exist"
      if cell["status"] == "tested in CI":
        assert platform == "CPU", f"{where}: CI runs on CPU only"
        assert any(e.startswith(("tests/", ".ci/")) for e in evidence), f"{where}: name the test"
      if cell["status"] == "measured once by hand":
        measured = [e for e in evidence if e.startswith("benchmarks/results/") and e.endswith(".json")]
        assert measured, f"{where}: name the JSON"
        for e in measured:
          backend = json.loads((REPO / e).read_text())["machine"]["backend"]
          assert backend == backends[platform], f"{where}: {e} was measured on {backend}"


def test_benchmarks_record_their_commit_and_command(tmp_path):
  common = load("benchmarks_common", REPO / "benchmarks" / "common.py")
  assert common.command_line([str(REPO / "benchmarks" / "decode.py"), "--json=a b.json"]) == (
      "benchmarks/decode.py '--json=a b.json'")
  from jformer import provenance

  assert provenance.git_commit(tmp_path) == "unknown"
  assert re.fullmatch(r"[0-9a-f]{4,40}(-dirty)?|unknown", common.machine()["commit"])


findings = load("docs_results_findings", PAGES / "findings.py")


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_finding_names_rows_that_exist_and_numbers_its_file_holds(path):
  problems = findings.problems(json.loads(path.read_text()))
  assert not problems, "\n".join(problems)


SWEEP = {"rows": [["modern", "1.747", "1.750 / 1.745", "128"], ["pre-LN", "1.821", "1.821 / 1.820", "148"]],
         "setup": "three minutes; the old run read 19.06"}


def finding(text, rows=("modern", "pre-LN"), seeds=(0, 1)):
  return {**SWEEP, "findings": [{"text": text, "rows": list(rows), "seeds": list(seeds)}]}


def test_a_finding_citing_a_missing_row_fails():
  [problem] = findings.problems(finding("modern scored 1.747", rows=("modern", "post-LN")))
  assert "cites rows ['post-LN'] that the table lacks" in problem and "'modern'" in problem


def test_a_finding_stating_a_number_its_file_lacks_fails():
  # 19.06 is only in the hand-written setup, and 0.080 is no difference of the cited rows' values (0.074 is).
  problems = findings.problems(finding("modern 1.747 against 1.821 (0.074 better), as an old run's 19.06 and 0.080"))
  assert [p.split("states ")[1].split(",")[0] for p in problems] == ["19.06", "0.080"]


def test_differences_ratios_and_percentages_come_from_the_cited_rows_only():
  ok = finding("1.747 against 1.821: 0.074 lower at 14% fewer steps (128 against 148), 1.16x the steps")
  assert findings.problems(ok) == []
  # The same 0.074 from one row alone is not a difference of that row's values.
  [problem] = findings.problems(finding("modern is 0.074 lower", rows=("modern",)))
  assert "states 0.074" in problem


def test_a_finding_without_rows_or_seeds_fails_and_one_seed_is_said():
  problems = findings.problems(finding("modern scored 1.747", rows=(), seeds=()))
  assert any("names no rows" in p for p in problems) and any("names no seeds" in p for p in problems)
  assert "one seed (0)" in findings.render([{"text": "x", "rows": ["modern"], "seeds": [0]}])


def test_check_fails_on_an_unsupported_finding(tmp_path, monkeypatch, capsys):
  results = tmp_path / "benchmarks" / "results"
  results.mkdir(parents=True)
  data = json.loads((REPO / "benchmarks" / "results" / "sweep_lm_blocks.json").read_text())
  data["findings"][0]["rows"].append("no such row")
  (results / "sweep_lm_blocks.json").write_text(json.dumps(data))
  (tmp_path / "docs" / "results").mkdir(parents=True)
  (tmp_path / "docs" / "results" / "support.json").write_text((PAGES / "support.json").read_text())
  shutil.copytree(PAGES / "report_cards", tmp_path / "docs" / "results" / "report_cards")
  monkeypatch.setattr(generate, "REPO", tmp_path)
  assert generate.main(["--check"]) == 1
  out = capsys.readouterr().out
  assert "unsupported finding: benchmarks/results/sweep_lm_blocks.json" in out and "no such row" in out


def test_a_reduced_run_says_so_in_its_pages_first_line():
  page = next(p for p in generate.PAGES if p.kind == "surgery")
  data = json.loads((REPO / "benchmarks" / "results" / "surgery.json").read_text())
  lines = generate.render_page(page, [("benchmarks/results/surgery.json", data)]).splitlines()
  assert lines[2] == "# " + page.title and lines[4].startswith("**Reduced run**: the teacher trained 150")


def test_the_board_page_shows_the_graded_rows_and_names_the_missing_ones(tmp_path):
  """report_cards.md from board.json and the rows that exist: a learning figure as its seeds' mean and range, a time as
  the ratio to the dot_product column graded beside it, the verdicts, and the rows not graded yet."""
  folder = tmp_path / "docs" / "results" / "report_cards"
  folder.mkdir(parents=True)
  metrics = [{"name": "acc", "label": "accuracy", "part": "p", "key": "a", "higher_is_better": True,
              "compare": "difference", "digits": 3},
             {"name": "ms", "label": "step ms", "part": "m", "key": "ms", "higher_is_better": False,
              "compare": "ratio", "digits": 0}]
  (folder / "board.json").write_text(json.dumps({"suite_version": 7, "metrics": metrics, "rows": {
      "dot_product": {"model.attention": "dot_product"}, "linear": {"model.attention": "linear"},
      "old": {"model.attention": "old"}}}))
  machine = {"cpu": "CPU X", "cpus": 2, "cpu_flags": "avx", "date": "2026-12-07T20:00:00", "commit": "abc1234"}
  linear = {"variant": "linear", "suite_version": 7, "seeds": 2, "total_seconds": 600.0, "wall_seconds": 660.0,
            "values": {"acc": 0.5, "ms": 30.0}, "samples": {"acc": [0.4, 0.6], "ms": [30.0]}, "machine": machine,
            "command": "jformer report-card --leaderboard",
            "comparison": {"acc": "-0.480 (worse)", "ms": "2.00x (worse)"},
            "baseline": {"variant": "dot_product", "values": {"acc": 0.98, "ms": 15.0}}}
  (folder / "linear.json").write_text(json.dumps(linear))
  (folder / "old.json").write_text(json.dumps({**linear, "suite_version": 6}))  # another suite: not a row here
  page = generate.render_board(tmp_path)
  assert "**A partial board**: 1 of 3 rows graded at suite version 7; not graded yet: dot_product, old." in page
  assert "| `linear` | 0.500 (0.400-0.600) | 2.00x |" in page
  assert "| `linear` | -0.480 (worse) | 2.00x (worse) |" in page
  assert "- `linear`: 2 seeds, 11.0 min; 2026-12-07T20:00:00, commit `abc1234`, CPU X" in page
  assert "(11 minutes for the 1 rows)" in page
