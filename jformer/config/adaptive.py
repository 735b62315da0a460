"""An adaptive recipe: `train.recipe`'s rules (`jformer.config.recipe`) applied to the measured corpus and the steps
the budget buys (estimated: `estimate_step_seconds`, a rough figure), when a new run starts; a key given on the
command line keeps its value, and a workdir that holds a run keeps its choices. In full: docs/training.md (adaptive
recipes).
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import ml_collections
from etils import epath

from jformer import config as config_lib
from jformer import coordination
from jformer.config.recipe import CORPUS_INPUTS, Rule, parse_rules
from jformer.data.corpus_size import CorpusSize, measure
from jformer.models.config import TransformerConfig
from jformer.models.flops import train_flops
from jformer.parallel import say

BYTES_PER_TOKEN = 4.0  # UTF-8 bytes per subword token of a 4k-8k SentencePiece vocabulary (bundled corpora: 3.6-4.1).
# A train step's matmul FLOP/s over the probe product's, on XLA:CPU: the demo (bfloat16) 0.82-0.84; the LM demo
# (float32, pre-norm, rotary) 0.52-0.57, whose steps this estimates about 1.4x too many.
STEP_EFFICIENCY = 0.8
PROBE_WARMUP, PROBE_REPS = 3, 20  # Calls of the probe product before timing (the first are slow), and timed.
BUDGET_TRAINING_FRACTION = 0.9  # Of a time budget, the share the steps get (the rest: evaluations, the plan).


@dataclasses.dataclass(frozen=True)
class Inputs:
  """What the rules read: the corpus size, and (once the corpus rules have chosen) the estimated steps."""
  corpus: CorpusSize
  steps: int | None = None
  passes: float | None = None
  step_seconds: float | None = None

  @property
  def tokens(self) -> float:
    return self.corpus.bytes / BYTES_PER_TOKEN

  def value(self, name: str) -> float:
    if name in ("examples", "words"):
      return getattr(self.corpus, name)
    return {"tokens": self.tokens, "steps": self.steps, "passes": self.passes}[name]


def adapt(config: ml_collections.ConfigDict, *, fixed=(), workdir: epath.PathLike | None = None
          ) -> ml_collections.ConfigDict:
  """`config` with `train.recipe`'s rules applied (validated and locked), or `config` itself when it has none.
  `fixed`: the dotted keys the command line set, which keep their values. Process 0 measures and chooses; every
  process of a multi-host job takes its choices."""
  rules = parse_rules(config.train.recipe, [key for key, _ in config_lib.declared()])
  if not rules:
    return config
  chosen = coordination.process_0_decides("recipe", lambda: choose(config, rules, fixed, workdir))
  return config_lib.checked(config_lib.from_values({**config_lib.flatten(config), **chosen}))


def choose(config: ml_collections.ConfigDict, rules: tuple[Rule, ...], fixed=(),
           workdir: epath.PathLike | None = None) -> dict:
  """{key: value} the `rules` choose for `config` (keys in `fixed` left out), said in one line; a workdir that
  holds a run gives that run's values."""
  free = [rule for rule in rules if rule.key not in fixed]
  kept = [rule.key for rule in rules if rule.key in fixed]
  kept_line = f"; kept from the command line: {', '.join(kept)}" if kept else ""
  if workdir is not None and (epath.Path(workdir) / "config.json").exists():
    recorded = config_lib.flatten(config_lib.read_run(workdir))
    chosen = {rule.key: recorded[rule.key] for rule in free}
    say(f"recipe: {workdir} holds a run; keeping its choices: "
        + ", ".join(f"{key} {value!r}" for key, value in chosen.items()) + kept_line)
    return chosen
  values = config_lib.flatten(config)
  inputs = Inputs(measure(config.data.dataset, config.data.path))
  reasons = {}
  for phase in ("corpus", "steps"):
    if phase == "steps" and any(rule.source not in CORPUS_INPUTS for rule in free):
      inputs = _with_steps(inputs, config_lib.from_values(values))
    for rule in free:
      if (rule.source in CORPUS_INPUTS) == (phase == "corpus"):
        values[rule.key], reasons[rule.key] = rule.choose(inputs.value(rule.source))
  say(f"recipe: {describe(inputs)} -> "
      + ", ".join(f"{key} {values[key]!r} ({why})" for key, why in reasons.items()) + kept_line)
  return {key: values[key] for key in reasons}


def describe(inputs: Inputs) -> str:
  """The measured inputs as the start-up line gives them: '111,147 pairs, 1.84M words, ~3.1M tokens, ~3,400
  steps (0.25 s each, estimated), ~2.1 passes'."""
  corpus = inputs.corpus
  text = f"{corpus.examples:,} {corpus.unit}, {corpus.words / 1e6:.2f}M words, ~{inputs.tokens / 1e6:.1f}M tokens"
  if inputs.steps is not None:
    per_step = f" ({inputs.step_seconds:.2f} s each, estimated)" if inputs.step_seconds else ""
    text += f", ~{inputs.steps:,} steps{per_step}, ~{inputs.passes:.1f} passes"
  return text


def estimate_step_seconds(config: ml_collections.ConfigDict) -> float:
  """Seconds per train step of `config` on this machine: `step_seconds` at the measured `probe_rate`."""
  return step_seconds(config, probe_rate(config))


def step_seconds(config: ml_collections.ConfigDict, rate: float) -> float:
  """Seconds per train step of `config` at `rate` matmul FLOP/s: its matmul FLOPs
  (`jformer.models.flops.train_flops`) over `rate` times `STEP_EFFICIENCY`."""
  model = TransformerConfig.from_config(config.model)
  return train_flops(model, rows=_rows(config), length=config.data.max_length) / (rate * STEP_EFFICIENCY)


def probe_rate(config: ml_collections.ConfigDict) -> float:
  """This machine's FLOP/s on `config`'s feed-forward product ([rows x length, d_model] @ [d_model, d_ff] in the
  compute dtype), the median of `PROBE_REPS` calls after `PROBE_WARMUP`."""
  model = TransformerConfig.from_config(config.model)
  x = jnp.ones((_rows(config) * config.data.max_length, model.d_model), model.compute_dtype)
  w = jnp.ones((model.d_model, model.d_ff), model.compute_dtype)
  product = jax.jit(jnp.dot)
  for _ in range(PROBE_WARMUP):  # compiles, and lets the first slow calls pass.
    product(x, w).block_until_ready()
  times = []
  for _ in range(PROBE_REPS):
    start = time.perf_counter()
    product(x, w).block_until_ready()
    times.append(time.perf_counter() - start)
  return 2 * x.shape[0] * model.d_model * model.d_ff / statistics.median(times)


def _rows(config) -> int:
  """Rows of `data.max_length` tokens per step: `data.batch_size`, or a token budget's worth."""
  data = config.data
  return max(1, data.batch_tokens // data.max_length) if data.batch_tokens else data.batch_size


def _with_steps(inputs: Inputs, config: ml_collections.ConfigDict) -> Inputs:
  """`inputs` with the steps `config` trains (its `train.steps`, or those its time budget buys at the estimated
  step time) and the passes they make over the training tokens (per side for translation pairs)."""
  seconds = None
  if config.train.budget_minutes:
    seconds = estimate_step_seconds(config)
    steps = int(config.train.budget_minutes * 60 * BUDGET_TRAINING_FRACTION / seconds)
  else:
    steps = config.train.steps
  sides = 2 if inputs.corpus.unit == "pairs" else 1
  passes = steps * _rows(config) * config.data.max_length / (inputs.tokens / sides)
  return dataclasses.replace(inputs, steps=steps, passes=passes, step_seconds=seconds)


