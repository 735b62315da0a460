"""The report card's fixed suite: what it trains and measures, and the figures it reads from each part.

Training runs (each a config of configs/ with the variant's overrides on top, trained with `jformer train`'s loop for
a fixed number of steps, once per seed):
  mqar_64x4         multi-query associative recall (Zoology) at configs/sweeps/mqar.py's first point: 64 tokens, 4
                    pairs, 500 steps, width 64. Its second point (128 tokens, 8 pairs) is not in the card: it takes
                    3,000 steps (~160 s a seed here, dot_product leaves its plateau after 2,000) and ranks the rows
                    measured so far as the first point does (docs/results/sweeps.md); 256 tokens and 16 pairs is
                    out of reach (dot_product still at 0.135 after 8,000 steps).
  induction         configs/induction.py: the token after the trigger's first occurrence.
  selective_copy    configs/selective_copy.py at SELECTIVE_COPY: data tokens scattered among blanks, copied in
                    order after a delimiter.
  lm                configs/lm_demo.py's data and recipe with a smaller model (LM_MODEL) for LM_STEPS steps (not its
                    time budget): bits per byte of the bundled English text's test split at the trained context 256
                    and at 512 and 1,024 (length extrapolation).
Measurements (random weights and tokens; only time and memory are read; graded for the baseline in the same
command, `Suite.measurements`):
  train_step    one train step of the LM demo's model on 1 row of TRAIN_STEP_LENGTH tokens: median milliseconds
                over TIMED_STEPS steps after one untimed, and the compiled step's temporary memory.
  decode_step   one KV-cache decode step of the LM demo's model for DECODE_BATCH rows after DECODE_LENGTH positions:
                median milliseconds over TIMED_STEPS, and the decode state's MiB.

A variant is graded by overrides of VARIANT_KEYS only: the rest of each config is the suite.
"""

from __future__ import annotations

import dataclasses
import pathlib
import runpy
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]  # configs/ lives beside the jformer package.
# The graded rows, one JSON card each: the leaderboard's (`jformer report-card --leaderboard`) and the baseline's,
# whose learning figures every card reuses (`card.cached_row`).
ROWS = REPO / "docs" / "results" / "report_cards"
TRAIN_STEP_LENGTH = 2048
DECODE_BATCH, DECODE_LENGTH = 8, 1024
TIMED_STEPS = 5
# The LM part trains a fixed number of steps (not the demo's time budget), so that its bits per byte do not depend on
# the machine's speed, with a model of a quarter of the demo's width and half its depth, so that two seeds fit the
# card's minutes (the demo's model takes ~1.4 s a step on 2 cores; the train and decode step measurements keep it).
LM_STEPS = 300
LM_MODEL = {"model.d_model": 128, "model.num_heads": 2, "model.d_ff": 341, "model.num_decoder_layers": 2}
# Selective copying at a size where dot_product learns the task within the card's steps and linear attention stays
# below it: 8 data tokens in 128 (Mamba's 16 in 4,096, or configs/selective_copy.py's 16 in 256, take the 2-layer
# model thousands of steps), 4,096 tokens a step, rotary positions, width 128 with 4 heads (at width 64, 1,500 steps
# gave dot_product 0.98 with one seed and 0.86 with another, and linear 0.87).
SELECTIVE_COPY = {"data.dataset_options.seq_len": 128, "data.dataset_options.num_tokens": 8, "data.max_length": 128,
                  "model.max_length": 128, "data.batch_size": 32, "model.positional": "rotary", "model.d_model": 128,
                  "model.num_heads": 4, "model.d_ff": 512, "train.steps": 1200, "train.eval_every": 400}
# The config keys that define a variant: its attention (with options, or per-layer kinds and their pattern), its
# positional encoding, and the files that register them.
VARIANT_KEYS = ("imports", "model.attention", "model.attention_options", "model.layer_kinds", "model.layer_pattern",
                "model.positional", "model.positional_options")
BASELINE = {"model.attention": "dot_product"}  # the row every card is printed beside.
# Bumped whenever a part, its config or a metric changes: a card of another version is not compared with this one's
# (a cached baseline of another version is measured again).
SUITE_VERSION = 2
KINDS = ("train", "train_step", "decode_step")


@dataclasses.dataclass(frozen=True)
class Part:
  """One part of the suite: `kind` "train" (a training run: its results.json), "train_step" or "decode_step" (a
  measurement, `jformer.report_card.measure`), of `config` (relative to the repository) with `overrides`."""
  name: str
  title: str
  kind: str
  config: str
  overrides: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Metric:
  """One row of the card: `key` of part `part`'s result (dotted into nested dicts), which direction is better, and
  how it compares with the baseline: "difference" (accuracy, bits per byte) or "ratio" (time, memory)."""
  name: str
  label: str
  part: str
  key: str
  higher_is_better: bool
  compare: str
  digits: int


@dataclasses.dataclass(frozen=True)
class Suite:
  parts: tuple[Part, ...]
  metrics: tuple[Metric, ...]

  def part(self, name: str) -> Part:
    return next(part for part in self.parts if part.name == name)

  def measurements(self) -> Suite:
    """The parts whose figures depend on the machine (time, memory), with their metrics: what is measured for the
    baseline in the same command as the variant, whatever is cached."""
    parts = tuple(part for part in self.parts if part.kind != "train")
    names = {part.name for part in parts}
    return Suite(parts, tuple(metric for metric in self.metrics if metric.part in names))


def mqar_part() -> Part:
  """The first MQAR point of configs/sweeps/mqar.py (its GRID and grid_point), at configs/mqar.py's width and rate."""
  grid = runpy.run_path(str(REPO / "configs" / "sweeps" / "mqar.py"))
  length, pairs = grid["GRID"][0]
  return Part(f"mqar_{length}x{pairs}", f"MQAR {length} tokens, {pairs} pairs", "train", "configs/mqar.py",
              grid["grid_point"](length, pairs))


def default_suite() -> Suite:
  """The suite of the module docstring."""
  parts = [mqar_part(),
           Part("induction", "induction heads", "train", "configs/induction.py"),
           Part("selective_copy", "selective copying", "train", "configs/selective_copy.py", SELECTIVE_COPY),
           Part("lm", f"language model, {LM_STEPS} steps", "train", "configs/lm_demo.py",
                {**LM_MODEL, "train.budget_minutes": 0.0, "train.steps": LM_STEPS, "train.eval_every": LM_STEPS}),
           Part("train_step", f"train step at {TRAIN_STEP_LENGTH:,} tokens", "train_step", "configs/lm_demo.py",
                {"data.max_length": TRAIN_STEP_LENGTH, "model.max_length": TRAIN_STEP_LENGTH, "data.batch_size": 1}),
           Part("decode_step", f"decode step at {DECODE_LENGTH:,} positions", "decode_step", "configs/lm_demo.py",
                {"model.max_length": DECODE_LENGTH})]
  accuracy = lambda part: Metric(f"{part.name}_accuracy", f"{part.title}: answer accuracy", part.name,
                                 "test_accuracy", True, "difference", 3)
  metrics = [accuracy(part) for part in parts if part.kind == "train" and part.name != "lm"]
  metrics += [Metric(f"lm_bits_per_byte_{n}", f"LM test bits per byte at {n:,}" + (" (trained)" if n == 256 else ""),
                     "lm", f"test_bits_per_byte_at.{n}", False, "difference", 3) for n in (256, 512, 1024)]
  metrics += [Metric("train_step_ms", f"train step ms, {TRAIN_STEP_LENGTH:,} tokens", "train_step", "ms", False,
                     "ratio", 0),
              Metric("train_step_temp_mib", f"train step temporary MiB, {TRAIN_STEP_LENGTH:,} tokens", "train_step",
                     "temp_mib", False, "ratio", 1),
              Metric("decode_step_ms", f"decode ms per step, {DECODE_BATCH} rows at {DECODE_LENGTH:,}",
                     "decode_step", "ms", False, "ratio", 2),
              Metric("decode_state_mib", f"decode state MiB, {DECODE_BATCH} rows at {DECODE_LENGTH:,}",
                     "decode_step", "state_mib", False, "ratio", 2)]
  return Suite(tuple(parts), tuple(metrics))


def check_variant(overrides: dict[str, Any]) -> None:
  """Raises ValueError naming any override that is not a variant's (VARIANT_KEYS): the suite is fixed."""
  foreign = [key for key in overrides if not any(key == k or key.startswith(k + ".") for k in VARIANT_KEYS)]
  if foreign:
    raise ValueError(f"{', '.join('--config.' + k for k in foreign)} would change the suite, which is "
                     f"fixed so that cards compare (jformer/report_card/suite.py); a variant is given by "
                     f"{', '.join('--config.' + k for k in VARIANT_KEYS)}")


def variant_name(overrides: dict[str, Any]) -> str:
  """A short name for the variant the overrides define: 'local(window_size=16)', 'pattern(linear,softmax)'."""
  if "model.layer_pattern" in overrides:
    pattern = overrides["model.layer_pattern"]
    pattern = pattern if isinstance(pattern, str) else ",".join(pattern)
    return f"pattern({pattern.strip('()[] ').replace(' ', '').replace(chr(39), '')})"
  name = str(overrides.get("model.attention", BASELINE["model.attention"]))
  options = {k.split(".", 2)[2]: v for k, v in overrides.items() if k.startswith("model.attention_options.")}
  options.update(overrides.get("model.attention_options") or {})
  if options:
    name += "(" + ",".join(f"{k}={v}" for k, v in sorted(options.items())) + ")"
  return name
