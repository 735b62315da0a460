"""Grading a variant on the suite (`jformer.report_card.suite`), and its card beside the baseline's.

    card = grade(overrides, workdir)             # trains and measures every part, progress throughout
    write(card, baseline, workdir)               # report_card.md, .json, .png

A card is a dict: the variant's name and overrides, `values` {metric: figure}, `seconds` {part: wall seconds},
`machine` (`jformer.provenance.machine`: CPU, versions, date, commit) and the command. Training parts reuse a
finished run in their workdir (the train loop's own rule), so an interrupted card resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from typing import Any, Callable

from etils import epath

from jformer import config as config_lib
from jformer import provenance
from jformer.report_card import measure, verdict
from jformer.report_card.suite import (BASELINE, DECODE_BATCH, DECODE_LENGTH, REPO, ROWS, SUITE_VERSION, TIMED_STEPS,
                                       Metric, Part, Suite, default_suite, variant_name)
from jformer.train.loop import train_and_evaluate
from jformer.train.preemption import Preempted
from jformer.train.progress import format_duration

FILES = ("report_card.md", "report_card.json", "report_card.png")
SECONDS_FILE = "report_card_seconds.txt"  # beside a training part's run: the wall seconds it took.


def cached_row(name: str) -> dict | None:
  """The card cached in the repository for variant `name` (ROWS/<name>.json) at this SUITE_VERSION, None if there is
  none (or only one of another version, whose figures do not compare)."""
  path = ROWS / f"{name}.json"
  row = json.loads(path.read_text()) if path.exists() else None
  if not row or row.get("suite_version") != SUITE_VERSION:
    return None
  return card_alone(row)


def card_alone(row: dict) -> dict:
  """A leaderboard row's card without what the board adds to it (the baseline column beside it, the comparisons)."""
  return {k: v for k, v in row.items() if k not in ("baseline", "comparison")}


def beside(cached: dict, measured_here: dict, suite: Suite) -> dict:
  """The baseline column of a card: the learning figures (accuracy, bits per byte: at fixed steps, the same on any
  machine) from the `cached` card, the time and memory from `measured_here` (the suite's measurements graded in the
  variant's command, on its machine). `sources` names where each kind came from."""
  machine = {metric.name for metric in suite.measurements().metrics}
  source = lambda metric: measured_here if metric in machine else cached
  return {**cached, "values": {m: source(m)["values"][m] for m in cached["values"]},
          "samples": {m: samples_of(source(m), m) for m in cached["values"]},
          "sources": {"learning": _source(cached, "cached"), "time and memory": _source(measured_here, "here")}}


def _source(card: dict, how: str) -> dict:
  return {"how": how, "date": card["machine"].get("date"), "commit": card["machine"].get("commit"),
          "machine": provenance.describe(card["machine"]) if card["machine"] else "", "command": card["command"]}


def save_row(card: dict) -> pathlib.Path:
  """Caches `card` as its variant's row in the repository (what --remeasure does for the baseline)."""
  path = ROWS / f"{card['variant']}.json"
  path.write_text(json.dumps(card, indent=1) + "\n")
  return path


def run_part(part: Part, overrides: dict[str, Any], workdir: epath.Path) -> dict:
  """The result of one part for the variant's `overrides`: a training run's results.json, or a measurement's."""
  config = config_lib.load(REPO / part.config, {**part.overrides, **overrides})
  if part.kind == "train":
    results = train_and_evaluate(config, workdir)
    if results.get("preempted"):
      raise Preempted(f"in the report card's run {workdir}")
    return results
  if part.kind == "train_step":
    return measure.train_step(config, TIMED_STEPS)
  return measure.decode_step(config, DECODE_BATCH, DECODE_LENGTH, TIMED_STEPS)


def timed_part(part: Part, overrides: dict[str, Any], workdir: epath.Path) -> tuple[dict, float, bool]:
  """(`run_part`'s result, its wall seconds, whether it was reused). A training run found finished in `workdir` is
  reused: its seconds are those written beside it (SECONDS_FILE) when it ran."""
  seconds_file = workdir / SECONDS_FILE
  start = time.perf_counter()
  result = run_part(part, overrides, workdir)
  if part.kind == "train" and seconds_file.exists() and result.get("finished", True):
    return result, float(seconds_file.read_text()), True
  seconds = time.perf_counter() - start
  if part.kind == "train":
    seconds_file.write_text(f"{seconds:.1f}\n")
  return result, seconds, False


def value(result: dict, key: str):
  """`result[key]`, the key dotted into nested dicts ("test_bits_per_byte_at.512")."""
  for part in key.split("."):
    result = result[part]
  return result


def figure(results: list[dict], key: str) -> tuple[float, list[float]]:
  """(the figure a card shows, the samples its verdict compares): a training part's mean over its seeds and each
  seed's figure; a measurement's median and its timed repetitions (`<key>_runs`), or its one figure (memory)."""
  if len(results) == 1 and f"{key}_runs" in results[0]:
    return value(results[0], key), list(results[0][f"{key}_runs"])
  each = [value(result, key) for result in results]
  return verdict.Figure.of(each).mean, each


def remaining_seconds(done: list[str], todo: list[str], elapsed: float, expected: dict[str, float]) -> float | None:
  """Seconds the parts `todo` should take on this machine: the `elapsed` seconds of the parts `done` here (run in
  this process, not reused) times the parts' relative cost, `expected` (the baseline card's seconds, measured on
  another machine: only their ratios are used). None when no part ran here yet (a reused part's seconds may be
  another machine's, and the baseline's are) or without the baseline's times."""
  if not done or not all(name in expected for name in done + todo):
    return None
  return elapsed * sum(expected[name] for name in todo) / sum(expected[name] for name in done)


def seeded_runs(part: Part, seeds: int) -> list[tuple[str, dict[str, Any]]]:
  """(the run's folder under the part's, its extra overrides) for each run of `part`: a training part once per seed
  (`train.seed` 0 .. seeds-1, in seed_<n>/), a measurement once (its figures are medians of repeated steps)."""
  if part.kind != "train":
    return [("", {})]
  return [(f"seed_{seed}", {"train.seed": seed}) for seed in range(seeds)]


def shared_preparation(first: epath.Path) -> dict[str, str]:
  """Overrides with which a later seed's run reuses what the first seed's run (in `first`) prepared of a text
  dataset: its tfds data and its SentencePiece vocabulary, neither of which depends on the seed; {} where it
  trained none (the synthetic tasks, generated per seed)."""
  vocabularies = sorted((first / "vocab").glob("spm_*.model")) if (first / "vocab").exists() else []
  if len(vocabularies) != 1:
    return {}
  return {"data.data_dir": os.fspath(first / "tfds"), "data.vocab_path": os.fspath(vocabularies[0])}


def grade(overrides: dict[str, Any], workdir: epath.PathLike, *, suite: Suite | None = None, seeds: int = 1,
          expected: dict[str, float] | None = None, say: Callable[[str], None] = print,
          command: str = "") -> dict:
  """Trains and measures every part of `suite` (default: `default_suite()`) for the variant the `overrides`
  define, in `<workdir>/<part>` (a training part once per seed, `seeded_runs`: the later seeds reuse the first's
  prepared text and vocabulary, `shared_preparation`, and load its compiled programs from the persistent compilation
  cache, the programs being the same); returns the card: `samples` holds
  each metric's figure per seed, `values` their mean. `expected`: seconds per part (the baseline card's), for the
  ETA in the progress lines; `command`: what graded it, recorded in the card."""
  if seeds < 1:
    raise ValueError(f"seeds={seeds}: a card needs at least one seed per training part")
  suite = suite or default_suite()
  workdir = epath.Path(workdir)
  name = variant_name(overrides)
  results, seconds, start = {}, {}, time.perf_counter()
  names, ran = [part.name for part in suite.parts], []  # ran: the parts run here, whose pace predicts the rest.
  for i, part in enumerate(suite.parts):
    took = f"; the baseline took {expected[part.name]:.0f} s" if expected and part.name in expected else ""
    runs = seeded_runs(part, seeds)
    say(f"report card {name} [{i + 1}/{len(names)}] {part.title}: {part.config} ({part.kind}"
        f"{f', {len(runs)} seeds' if len(runs) > 1 else ''}{took})")
    results[part.name], seconds[part.name], reused = [], 0.0, True
    for n, (folder, extra) in enumerate(runs):
      shared = shared_preparation(workdir / part.name / runs[0][0]) if n else {}
      result, took_here, reused_here = timed_part(part, {**overrides, **extra, **shared}, workdir / part.name / folder)
      results[part.name].append(result)
      seconds[part.name] += took_here
      reused &= reused_here
    ran += [] if reused else [part.name]
    elapsed = time.perf_counter() - start
    left = remaining_seconds(ran, names[i + 1:], sum(seconds[n] for n in ran), expected or {})
    eta = "" if left is None else f", about {format_duration(left)} left"
    if not ran and expected and i + 1 < len(names):
      eta = ", the time left is known once a part has run here"
    say(f"report card {name} [{i + 1}/{len(names)}] {part.title} done in {seconds[part.name]:.0f} s; "
        f"{format_duration(elapsed)} so far{eta}")
  figures = {m.name: figure(results[m.part], m.key) for m in suite.metrics}
  return {"variant": name, "overrides": {k: str(v) for k, v in overrides.items()}, "seeds": seeds,
          "suite_version": SUITE_VERSION,
          "values": {metric: shown for metric, (shown, _) in figures.items()},
          "samples": {metric: samples for metric, (_, samples) in figures.items()},
          "seconds": seconds, "total_seconds": sum(seconds.values()),  # reused runs count as they ran
          "machine": provenance.machine(REPO, exclude=(ROWS.relative_to(REPO).as_posix(),)),
          "command": command or "jformer.report_card.grade (Python)"}


def _figure(metric: Metric, x) -> str:
  return "-" if x is None else f"{x:,.{metric.digits}f}"


def comparison(metric: Metric, x, base) -> str:
  """How `x` compares with the baseline's `base` (`verdict.compare`): a signed difference or a ratio, with
  '(better)', '(worse)' or '(within noise)'. A figure is one number, or the list of its seeds' or repetitions'."""
  if x is None or base is None:
    return "-"
  return verdict.compare(verdict.Figure.of(x), verdict.Figure.of(base), higher_is_better=metric.higher_is_better,
                         ratio=metric.compare == "ratio", digits=metric.digits)


def samples_of(card: dict, metric: str) -> list[float] | None:
  """The metric's figure per seed (or repetition), or its one value as a list; None where the card has none."""
  figure = card.get("samples", {}).get(metric)
  return figure if figure is not None else (None if card["values"].get(metric) is None else [card["values"][metric]])


def table(card: dict, baseline: dict | None, suite: Suite) -> str:
  """The markdown table: one row per metric, the variant's figure, the baseline's, and how they compare."""
  if baseline is None:
    return "\n".join([f"| metric | {card['variant']} |", "|---|---:|"] + [
        f"| {metric.label} | {_figure(metric, card['values'].get(metric.name))} |" for metric in suite.metrics])
  base_name = baseline["variant"]
  lines = [f"| metric | {card['variant']} | {base_name} | {card['variant']} vs {base_name} |",
           "|---|---:|---:|---:|"]
  for metric in suite.metrics:
    x, base = card["values"].get(metric.name), baseline["values"].get(metric.name)
    lines.append(f"| {metric.label} | {_figure(metric, x)} | {_figure(metric, base)} | "
                 f"{comparison(metric, samples_of(card, metric.name), samples_of(baseline, metric.name))} |")
  return "\n".join(lines)


def _provenance_line(card: dict) -> str:
  info = card["machine"]
  return (f"`{card['variant']}`: {info['date']}, commit {info['commit']}, {provenance.describe(info)}; "
          f"{format_duration(card['total_seconds'])}; `{card['command']}`")


def notes(card: dict, baseline: dict | None) -> list[str]:
  """What a reader must know to compare the two rows."""
  if baseline is None:
    return ([] if card["overrides"] == BASELINE else
            [f"No baseline card is cached for {BASELINE}: rerun with --remeasure to measure it here."])
  if "sources" in baseline:  # its time and memory were measured beside the variant's.
    return []
  if baseline["machine"]["cpu"] != card["machine"]["cpu"]:
    return [f"The baseline ran on another CPU ({baseline['machine']['cpu']}): its times and memory do not compare "
            "with these; rerun with --remeasure to measure it beside the variant."]
  return []


def markdown(card: dict, baseline: dict | None, suite: Suite) -> str:
  lines = [f"# Report card: `{card['variant']}`", "", table(card, baseline, suite), "",
           "Accuracies are of the answers on each task's test split (higher is better); bits per byte of the bundled "
           "text's test split (lower is better); times are medians of "
           f"{TIMED_STEPS} steps (jformer/report_card/suite.py).", "", "![report card](report_card.png)", "",
           "Measured:", "", f"- {_provenance_line(card)}"]
  if baseline and "sources" in baseline:
    how = lambda source: "cached" if source["how"] == "cached" else "measured in this command"
    lines += [f"- `{baseline['variant']}`'s {kind}: {how(source)}"
              f", {source['date']}, commit {source['commit']}, {source['machine']}; `{source['command']}`"
              for kind, source in baseline["sources"].items()]
  elif baseline:
    lines.append(f"- {_provenance_line(baseline)}")
  return "\n".join(lines + [""] + [f"**Note**: {note}" for note in notes(card, baseline)]) + "\n"


def plot(card: dict, baseline: dict | None, suite: Suite, path: os.PathLike | str) -> None:
  """Three panels: answer accuracy per task, test bits per byte against context, and time and memory as ratios to
  the baseline."""
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  cards = [c for c in (card, baseline) if c]
  canvas, (accuracy, bits, cost) = plt.subplots(1, 3, figsize=(15, 4.5))
  tasks = [m for m in suite.metrics if m.key == "test_accuracy"]
  width = 0.8 / len(cards)
  for i, c in enumerate(cards):
    accuracy.bar([j + i * width for j in range(len(tasks))], [c["values"].get(m.name) or 0 for m in tasks], width,
                 label=c["variant"])
  accuracy.set_xticks([j + width * (len(cards) - 1) / 2 for j in range(len(tasks))],
                      [m.part.replace("_", " ") for m in tasks], rotation=20, fontsize="small")
  accuracy.set(ylim=(0, 1.02), ylabel="answer accuracy (test)", title="synthetic tasks")
  lm = [m for m in suite.metrics if m.part == "lm"]
  for c in cards:
    points = [(int(m.key.rsplit(".", 1)[1]), c["values"].get(m.name)) for m in lm]
    bits.plot(*zip(*[p for p in points if p[1] is not None]), marker="o", label=c["variant"])
  bits.set_xscale("log", base=2)
  bits.set(xlabel="context (trained at 256)", ylabel="test bits per byte", title="language model")
  costs = [m for m in suite.metrics if m.compare == "ratio"]
  if baseline:
    ratios = [(card["values"][m.name] / baseline["values"][m.name]
               if card["values"].get(m.name) and baseline["values"].get(m.name) else 0) for m in costs]
    cost.barh(range(len(costs)), ratios, color="tab:blue")
    cost.axvline(1.0, color="tab:orange", label=f"{baseline['variant']} = 1")
    cost.set(xlabel=f"x {baseline['variant']} (lower is better)", title="time and memory")
    cost.set_yticks(range(len(costs)), [m.label for m in costs], fontsize="small")
  else:
    cost.set_axis_off()
  for ax in (accuracy, bits, cost):
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize="small")
  canvas.suptitle(f"report card: {card['variant']}")
  canvas.tight_layout()
  with epath.Path(path).open("wb") as f:
    canvas.savefig(f, format="png", dpi=90)
  plt.close(canvas)


def write(card: dict, baseline: dict | None, workdir: epath.PathLike, suite: Suite | None = None) -> dict[str, str]:
  """Writes FILES into `workdir`: the card's markdown (with the baseline's row), its JSON, its plot."""
  suite = suite or default_suite()
  workdir = epath.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  paths = {name: os.fspath(workdir / name) for name in FILES}
  epath.Path(paths["report_card.md"]).write_text(markdown(card, baseline, suite))
  epath.Path(paths["report_card.json"]).write_text(json.dumps(card, indent=1) + "\n")
  plot(card, baseline, suite, paths["report_card.png"])
  return paths
