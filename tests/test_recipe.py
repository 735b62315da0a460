"""The adaptive recipe (`train.recipe`): rules read and checked, the corpus measured, the step estimate, the choices
made once per run (command-line keys kept, a resumed run keeping its own), and the FLOP formula it estimates from."""

import gzip
import json
import math

import pytest

from helpers import SMALL, load_tiny
from jformer import config as config_lib
from jformer.config import adaptive
from jformer.config.recipe import Rule, parse_rules
from jformer.data.corpus_size import measure
from jformer.models.config import TransformerConfig
from jformer.models.flops import forward_flops, train_flops

KEYS = [key for key, _ in config_lib.declared()]
VOCAB_RULE = ("model.vocab_size", "examples", ((300, 256), (1000, 320), (None, 384)))
DROPOUT_RULE = ("model.dropout_rate", "passes", ((2, 0.1), (6, 0.2), (None, 0.3)))


def test_a_rule_takes_the_first_bracket_its_input_does_not_exceed():
  rule = parse_rules([VOCAB_RULE], KEYS)[0]
  assert rule.choose(300) == (256, "examples <= 300")  # bounds are inclusive.
  assert rule.choose(301) == (320, "examples <= 1,000")
  assert rule.choose(10**9) == (384, "examples > 1,000")
  assert Rule("model.dropout_rate", "passes", ((None, 0.3),)).choose(5) == (0.3, "any passes")


@pytest.mark.parametrize("rule, fragment", [
    (("model.vocab_sise", "examples", ((None, 1),)), "'model.vocab_sise' is not a config key"),
    (("model.vocab_size", "pairs", ((None, 1),)), "unknown input 'pairs'; known: examples, words, tokens, steps"),
    (("model.d_model", "passes", ((None, 128),)), "a rule on passes may not set model.d_model"),
    (("model.vocab_size", "examples", ((10, 1), (5, 2), (None, 3))), "bounds must increase, got [10, 5]"),
    (("model.vocab_size", "examples", ((10, 1), (20, 2))), "the last is None"),
    (("model.vocab_size", "examples", ()), "brackets are ((bound, value), ..., (None, value))"),
    (("model.vocab_size", "examples"), "a rule is (key, input, ((bound, value), ..., (None, value)))"),
])
def test_a_bad_rule_is_refused_naming_it(rule, fragment):
  with pytest.raises(ValueError) as error:
    parse_rules([rule], KEYS)
  assert fragment in str(error.value) and "train.recipe rule 1" in str(error.value)


def test_a_key_set_by_two_rules_is_refused():
  with pytest.raises(ValueError, match="model.vocab_size is set by an earlier rule too"):
    parse_rules([VOCAB_RULE, VOCAB_RULE], KEYS)


def test_a_config_with_a_bad_rule_fails_to_load(tiny_corpus):
  with pytest.raises(ValueError, match="invalid config: .*unknown input 'sentences'"):
    load_tiny(tiny_corpus, **{"train.recipe": "(('model.vocab_size', 'sentences', ((None, 300),)),)"})


def test_the_corpus_is_measured_from_its_files(tiny_corpus, text_corpus):
  pairs = measure("parallel_text", str(tiny_corpus))
  lines = [(tiny_corpus / f"train.{side}").read_text(encoding="utf-8").splitlines() for side in ("src", "tgt")]
  assert pairs.examples == 400 and pairs.unit == "pairs"
  assert pairs.words == sum(len(line.split()) for side in lines for line in side)
  assert pairs.bytes == sum(len(line.encode()) + 1 for side in lines for line in side)
  documents = measure("text", str(text_corpus))
  assert documents.examples == 150 and documents.unit == "documents"
  assert documents.words == len((text_corpus / "train.txt").read_text(encoding="utf-8").split())
  with pytest.raises(ValueError, match="folder dataset .* not 'lm1b'"):
    measure("lm1b", "")


def test_a_gzipped_corpus_measures_as_its_text(tiny_corpus, tmp_path):
  for split in ("train", "valid", "test"):
    for side in ("src", "tgt"):
      with gzip.open(tmp_path / f"{split}.{side}.gz", "wt", encoding="utf-8") as f:
        f.write((tiny_corpus / f"{split}.{side}").read_text(encoding="utf-8"))
  assert measure("parallel_text", str(tmp_path)) == measure("parallel_text", str(tiny_corpus))


def _rules_config(corpus, **extra):
  return load_tiny(corpus, **{"train.recipe": (VOCAB_RULE, DROPOUT_RULE), "train.steps": 300, **extra})


def test_the_rules_choose_from_the_measured_corpus_and_steps(tiny_corpus, capsys):
  config = _rules_config(tiny_corpus)
  adapted = adaptive.adapt(config, fixed={})
  tokens_per_side = measure("parallel_text", str(tiny_corpus)).bytes / adaptive.BYTES_PER_TOKEN / 2
  passes = 300 * 8 * 32 / tokens_per_side  # steps x rows x max_length / tokens per side.
  assert adapted.model.vocab_size == 320  # 400 pairs: the second bracket.
  assert adapted.model.dropout_rate == (0.1 if passes <= 2 else 0.2 if passes <= 6 else 0.3)
  line = capsys.readouterr().out.strip()
  assert line.startswith("recipe: 400 pairs, ") and f"~300 steps, ~{passes:.1f} passes" in line
  assert "model.vocab_size 320 (examples <= 1,000)" in line and "model.dropout_rate" in line
  assert adapted.train.recipe == config.train.recipe and config.model.vocab_size == 300  # config is not changed.


def test_more_steps_make_more_passes_and_more_dropout(tiny_corpus):
  few = adaptive.adapt(_rules_config(tiny_corpus, **{"train.steps": 1}), fixed={})
  many = adaptive.adapt(_rules_config(tiny_corpus, **{"train.steps": 100_000}), fixed={})
  assert (few.model.dropout_rate, many.model.dropout_rate) == (0.1, 0.3)


def test_a_key_given_on_the_command_line_keeps_its_value(tiny_corpus, capsys):
  config = _rules_config(tiny_corpus, **{"model.dropout_rate": 0.05})
  adapted = adaptive.adapt(config, fixed={"model.dropout_rate": "0.05"})
  assert adapted.model.dropout_rate == 0.05
  assert "kept from the command line: model.dropout_rate" in capsys.readouterr().out


def test_a_resumed_run_keeps_its_own_choices(tiny_corpus, tmp_path, capsys):
  config = _rules_config(tiny_corpus)
  first = adaptive.adapt(config, fixed={}, workdir=tmp_path)
  recorded = json.loads(first.to_json_best_effort())
  recorded["model"]["dropout_rate"] = 0.25  # what the first start chose on its machine.
  (tmp_path / "config.json").write_text(json.dumps(recorded))
  config_lib.record_config(tmp_path)
  resumed = adaptive.adapt(config, fixed={}, workdir=tmp_path)
  assert resumed.model.dropout_rate == 0.25 and resumed.model.vocab_size == first.model.vocab_size
  assert "holds a run; keeping its choices: model.vocab_size 320, model.dropout_rate 0.25" in capsys.readouterr().out


def test_a_config_without_rules_is_returned_as_it_is(tiny_corpus):
  config = load_tiny(tiny_corpus)
  assert adaptive.adapt(config, fixed={}) is config


def test_a_budget_estimates_steps_from_the_machines_matmul_rate(tiny_corpus):
  small = load_tiny(tiny_corpus)
  wide = load_tiny(tiny_corpus, **{"model.d_model": 128, "model.d_ff": 512, "model.num_heads": 4})
  rate = adaptive.probe_rate(small)  # one measurement: the estimates below are arithmetic on it.
  assert rate > 0 and math.isfinite(rate)
  small_seconds, wide_seconds = (adaptive.step_seconds(c, rate) for c in (small, wide))
  flops = [train_flops(TransformerConfig.from_config(c.model), rows=c.data.batch_size, length=c.data.max_length)
           for c in (small, wide)]
  assert small_seconds == pytest.approx(flops[0] / (rate * adaptive.STEP_EFFICIENCY), rel=1e-12)
  assert wide_seconds / small_seconds == pytest.approx(flops[1] / flops[0], rel=1e-12) and flops[1] > flops[0]
  inputs = adaptive.Inputs(measure("parallel_text", str(tiny_corpus)))
  budgeted = load_tiny(tiny_corpus, **{"train.budget_minutes": 1.0})
  with_steps = adaptive._with_steps(inputs, budgeted)
  assert with_steps.steps == int(60 * adaptive.BUDGET_TRAINING_FRACTION / with_steps.step_seconds)
  assert math.isclose(with_steps.passes, with_steps.steps * 8 * 32 / (inputs.tokens / 2))


def test_forward_flops_is_the_papers_formula_for_the_encoder_decoder():
  b, s, t, d, f, v, n = 3, 7, 5, 16, 64, 100, 2
  paper = (n * (8 * b * s * d * d + 4 * b * s * s * d + 4 * b * s * d * f)
           + n * (8 * b * t * d * d + 4 * b * t * t * d + 4 * b * t * d * d + 4 * b * s * d * d + 4 * b * t * s * d
                  + 4 * b * t * d * f) + 2 * b * t * d * v)
  assert forward_flops(rows=b, source_length=s, target_length=t, d_model=d, d_ff=f, vocab=v, encoder_layers=n,
                       decoder_layers=n) == paper


def test_train_flops_of_a_gated_grouped_query_language_model():
  config = TransformerConfig(architecture="lm", vocab_size=100, d_model=16, num_heads=4, num_kv_heads=1, d_ff=48,
                             num_encoder_layers=6, num_decoder_layers=2, activation="swiglu")
  b, t, d, f = 3, 8, 16, 48
  layer = 4 * b * t * d * d + 4 * b * t * d * d // 4 + 4 * b * t * t * d + 6 * b * t * d * f  # Q,O; K,V at 1/4.
  assert train_flops(config, rows=b, length=t) == 3 * (2 * layer + 2 * b * t * d * 100)  # no encoder layers.


def test_the_lm_demo_states_its_rules_and_the_translation_demo_its_measured_values():
  lm = config_lib.load(SMALL.parent / "lm_demo.py")
  assert {rule.key for rule in parse_rules(lm.train.recipe, KEYS)} == {"model.vocab_size", "model.dropout_rate"}
  for name in ("demo.py", "own_corpus.py"):  # rules for these lost to them (configs/sweeps/demo_corpus_size.py).
    config = config_lib.load(SMALL.parent / name)
    rules = parse_rules(config.train.recipe, KEYS)  # one bracket each: the values, chosen from any corpus.
    assert {(rule.key, rule.brackets) for rule in rules} == {("model.vocab_size", ((None, 8000),)),
                                                            ("model.dropout_rate", ((None, 0.1),))}
    model = config.model  # the modern block (configs/sweeps/demo_slow_machine.py).
    assert (model.norm, model.normalization, model.activation, model.qk_norm, model.use_bias) == (
        "pre", "rmsnorm", "swiglu", True, False)
    assert config.train.budget_minutes > 0 and not config.train.average_checkpoints


def test_the_demo_prints_what_its_recipe_measured_and_chose(tiny_corpus, capsys):
  demo = config_lib.load(SMALL.parent / "demo.py", {"data.path": str(tiny_corpus)})
  adapted = adaptive.adapt(demo, fixed={"data.path": str(tiny_corpus)})
  line = capsys.readouterr().out.strip()
  assert line.startswith("recipe: 400 pairs, ") and "s each, estimated)" in line and " passes -> " in line
  assert line.endswith("model.vocab_size 8000 (any examples), model.dropout_rate 0.1 (any passes)")
  assert (adapted.model.vocab_size, adapted.model.dropout_rate) == (8000, 0.1)


def test_the_former_module_name_still_serves_the_recipe():
  """`jformer.train.recipe`, where the adaptive recipe lived before `jformer.config.adaptive`, gives the same
  functions and constants (code written against the released name keeps working)."""
  from jformer.train import recipe

  assert (recipe.adapt, recipe.choose, recipe.Inputs, recipe.probe_rate) == (
      adaptive.adapt, adaptive.choose, adaptive.Inputs, adaptive.probe_rate)
  assert recipe.BUDGET_TRAINING_FRACTION == adaptive.BUDGET_TRAINING_FRACTION
