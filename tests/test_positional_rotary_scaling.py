"""Rotary scaling (`model.positional_options.scaling`, jformer/positional/rotary.py): the inverse frequencies and the
cos/sin scale of each config in tests/golden/rope_frequencies.json equal what transformers' `ROPE_INIT_FUNCTIONS`
returned for it (recorded by `tests/golden/make_fixtures.py --only rope`), read from the config.json fields through
the Llama family's mapping (`jformer.interop.rope`); the encoding reads a call's length for 'dynamic' and scales by
YaRN's attention factor; `model.head_dim` sets the heads' width; bad options are refused at load."""

from __future__ import annotations

import re
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from jformer import config as config_lib
from jformer import positional
from jformer.interop.rope import rotary_options
from jformer.models import LanguageModel, TransformerConfig
from jformer.ops import positional as positional_ops
from jformer.positional import rotary

CASES = json.loads((pathlib.Path(__file__).parent / "golden" / "rope_frequencies.json").read_text())["cases"]


def case_id(case):
  rope = case["config"]["rope_parameters"]
  return f"{rope['rope_type']}-{case['config']['head_dim']}" + (f"-n{case['seq_len']}" if case["seq_len"] else "")


@pytest.mark.parametrize("case", CASES, ids=map(case_id, CASES))
def test_frequencies_equal_transformers(case):
  fields = case["config"]
  options = rotary_options({"model_type": "llama", **fields}, "llama")
  assert options["scaling"] == fields["rope_parameters"]["rope_type"]
  inv_freq, scale = rotary.frequencies(fields["head_dim"], case["seq_len"] or 1,
                                       max_length=fields["max_position_embeddings"], **options)
  np.testing.assert_allclose(np.asarray(inv_freq), case["inv_freq"], rtol=1e-6, atol=0)
  assert scale == pytest.approx(case["attention_factor"], rel=1e-6)


def test_the_cases_scale_the_frequencies():
  """Every recorded case differs from plain RoPE (so the comparison above checks the scaling), bar dynamic NTK up to
  max_position_embeddings tokens, which leaves them as they are."""
  for case in CASES:
    plain = np.asarray(positional_ops.rotary_inv_freq(case["config"]["head_dim"],
                                                      case["config"]["rope_parameters"]["rope_theta"]))
    unchanged = (case["seq_len"] or 10**9) <= case["config"]["max_position_embeddings"]
    assert np.allclose(plain, case["inv_freq"], rtol=1e-6) == unchanged, case_id(case)


def test_dynamic_reads_the_calls_longest_position():
  """'dynamic' rotates as plain RoPE while positions stay below original_max_length, and with the base of n = the
  longest position + 1 beyond it (transformers' `dynamic_rope_update` on the same position ids)."""
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 100, 2, 8))
  options = dict(dims={"max_length": 64}, params={}, base=10000.0, scaling="dynamic", factor=2.0)
  short, long = jnp.arange(64)[None], jnp.arange(100)[None]
  np.testing.assert_array_equal(rotary.rotary(x[:, :64], short, **options),
                                positional_ops.apply_rotary(x[:, :64], short))
  want = positional_ops.apply_rotary(x, long, inv_freq=positional_ops.dynamic_ntk_inv_freq(
      8, 10000.0, factor=2.0, max_length=64, length=100))
  np.testing.assert_allclose(rotary.rotary(x, long, **options), want, rtol=1e-6, atol=1e-6)
  assert not np.allclose(want, positional_ops.apply_rotary(x, long), atol=1e-3)


def test_yarn_scales_queries_and_keys_by_its_attention_factor():
  """YaRN multiplies cos and sin by 0.1 ln(factor) + 1 (or the given attention_factor): a rotation times it."""
  x = jax.random.normal(jax.random.PRNGKey(1), (2, 5, 3, 16))
  positions = jnp.arange(5)[None]
  for given, factor in ((0.0, 0.1 * np.log(4.0) + 1), (1.25, 1.25)):
    rotated = rotary.rotary(x, positions, dims={"max_length": 64}, params={}, scaling="yarn", factor=4.0,
                            original_max_length=16, attention_factor=given)
    np.testing.assert_allclose(jnp.linalg.norm(rotated, axis=-1), factor * jnp.linalg.norm(x, axis=-1), rtol=1e-5)


def test_head_dim_sets_the_width_of_the_heads():
  """`model.head_dim` 0 is d_model / num_heads; set, the projections are [D, H, head_dim] and back, whatever
  d_model / num_heads is (Qwen3; d_model need not divide then)."""
  base = dict(architecture="lm", vocab_size=16, d_model=30, num_heads=4, num_decoder_layers=1, num_encoder_layers=0,
              positional="rotary", max_length=8)
  assert TransformerConfig.from_config({**base, "d_model": 32}).head_width == 8
  config = TransformerConfig.from_config({**base, "head_dim": 6, "num_kv_heads": 2})
  assert config.head_width == 6 and config.dims["head_dim"] == 6
  params = nn.unbox(LanguageModel(config).init(jax.random.PRNGKey(0), jnp.ones((1, 4), jnp.int32))["params"])
  attention = params["decoder"]["layer_0"]["self_attention"]
  assert attention["query"]["kernel"].shape == (30, 4, 6) and attention["key"]["kernel"].shape == (30, 2, 6)
  assert attention["out"]["kernel"].shape == (4, 6, 30)
  with pytest.raises(ValueError, match=re.escape("d_model=30 is not divisible by num_heads=4 (or set model.head_dim)")):
    TransformerConfig.from_config(base)


@pytest.mark.parametrize("options, reason", [
    ({"scaling": "ntk"}, r"model.positional_options.scaling='ntk' is not one of \['none', 'linear', 'dynamic', "
                         r"'llama3', 'yarn'\]"),
    ({"scaling": "linear", "factor": 0.0}, "rotary scaling 'linear' needs a positive model.positional_options.factor"),
    ({"scaling": "llama3", "low_freq_factor": 4.0, "high_freq_factor": 4.0},
     "rotary scaling 'llama3' needs high_freq_factor > low_freq_factor, got 4.0 <= 4.0"),
    ({"original_max_length": 0}, r"positional encoding 'rotary' needs a positive int original_max_length"),
])
def test_bad_scaling_options_fail_at_load(options, reason):
  values = {"model.positional": "rotary", **{f"model.positional_options.{k}": v for k, v in options.items()}}
  with pytest.raises(ValueError, match=reason):
    config_lib.checked(config_lib.from_values(values))


def test_rotary_declares_its_scaling_options():
  assert set(positional.get("rotary").options) == {
      "base", "scaling", "factor", "original_max_length", "low_freq_factor", "high_freq_factor", "beta_fast",
      "beta_slow", "truncate", "attention_factor"}
