"""The rules of an adaptive recipe (`train.recipe`), as a config states them, read and checked: each sets one key from
one measured input by brackets, the first bracket whose bound the input does not exceed giving the value (the last
bound None). An example and how they are applied (`jformer.config.adaptive`): docs/training.md (adaptive recipes).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

# Input -> what it measures. The corpus inputs are read from the training files; the step inputs are estimated from
# the config the corpus rules chose (`jformer.config.adaptive.estimate_step_seconds`).
CORPUS_INPUTS = {
    "examples": "sentence pairs (or documents) of the train split",
    "words": "whitespace-separated words of the train split, both sides",
    "tokens": "subword tokens of the train split, both sides, estimated as its UTF-8 bytes / 4",
}
STEP_INPUTS = {
    "steps": "training steps: train.steps, or those the time budget buys at the estimated step time",
    "passes": "passes over the training tokens: steps x rows x data.max_length / tokens per side",
}
INPUTS = {**CORPUS_INPUTS, **STEP_INPUTS}

# Keys the step estimate reads: a rule on steps or passes may not set them (it would change its own input).
STEP_KEYS = ("model.architecture", "model.vocab_size", "model.d_model", "model.num_heads", "model.num_kv_heads",
             "model.d_ff", "model.num_encoder_layers", "model.num_decoder_layers", "model.activation", "model.dtype",
             "data.batch_size", "data.batch_tokens", "data.max_length", "train.steps", "train.budget_minutes",
             "train.recipe")


@dataclasses.dataclass(frozen=True)
class Rule:
  """`key` = the value of the first of `brackets` ((bound, value), ...) whose bound `source` does not exceed."""
  key: str
  source: str
  brackets: tuple[tuple[float | None, Any], ...]

  def choose(self, measured: float) -> tuple[Any, str]:
    """(value, why): the value for input `measured`, and the bracket that gave it, e.g. "examples <= 20,000"."""
    for index, (bound, value) in enumerate(self.brackets):
      if bound is None or measured <= bound:
        why = (f"{self.source} <= {bound:,}" if bound is not None else
               f"{self.source} > {self.brackets[index - 1][0]:,}" if index else f"any {self.source}")
        return value, why
    raise AssertionError("the last bracket is open (checked by parse_rules)")


def parse_rules(rules: Sequence, known_keys: Sequence[str]) -> tuple[Rule, ...]:
  """`train.recipe` as Rules, in order; raises ValueError naming the rule and what is wrong with it."""
  parsed = []
  for number, rule in enumerate(rules or (), start=1):
    where = f"train.recipe rule {number} ({rule!r})"
    if not isinstance(rule, (tuple, list)) or len(rule) != 3:
      raise ValueError(f"{where}: a rule is (key, input, ((bound, value), ..., (None, value)))")
    key, source, brackets = rule
    if key not in known_keys:
      raise ValueError(f"{where}: '{key}' is not a config key (`jformer summary` or docs/config.md lists them)")
    if source not in INPUTS:
      raise ValueError(f"{where}: unknown input '{source}'; known: {', '.join(INPUTS)}")
    if source in STEP_INPUTS and key in STEP_KEYS:
      raise ValueError(f"{where}: a rule on {source} may not set {key}, which the step estimate reads; choose it "
                       f"from {', '.join(CORPUS_INPUTS)}")
    if not isinstance(brackets, (tuple, list)) or not brackets or not all(
        isinstance(b, (tuple, list)) and len(b) == 2 for b in brackets):
      raise ValueError(f"{where}: brackets are ((bound, value), ..., (None, value))")
    bounds = [bound for bound, _ in brackets]
    if bounds[-1] is not None or any(not isinstance(b, (int, float)) or isinstance(b, bool) for b in bounds[:-1]):
      raise ValueError(f"{where}: every bound but the last is a number, and the last is None (any larger input)")
    if any(later <= earlier for earlier, later in zip(bounds[:-2], bounds[1:-1])):
      raise ValueError(f"{where}: bounds must increase, got {bounds[:-1]}")
    if any(r.key == key for r in parsed):
      raise ValueError(f"{where}: {key} is set by an earlier rule too; keep one")
    parsed.append(Rule(key, source, tuple((bound, value) for bound, value in brackets)))
  return tuple(parsed)
