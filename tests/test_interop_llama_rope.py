"""The Llama family's rotary settings and Qwen3 (jformer/interop/rope.py, llama.py): config.json's rope_parameters (or
the older rope_scaling with a top-level rope_theta) become `rotary` options; the golden fixtures tests/golden/hf/llama3
and qwen3 depend on them (plain rotary gives other logits); what jformer cannot compute is refused in one line naming
the field; an export writes the rotary settings back and refuses a run whose scaling changed."""

from __future__ import annotations

import json
import pathlib
import re

import jax.numpy as jnp
import numpy as np
import pytest

from jformer import config as config_lib
from jformer import interop
from jformer.interop.family import family_of
from jformer.models import LanguageModel, TransformerConfig

from test_interop_golden import jformer_targets

GOLDEN = pathlib.Path(__file__).parent / "golden" / "hf"


def hf_config(family: str, **change) -> dict:
  return {**json.loads((GOLDEN / family / "config.json").read_text()), **change}


def test_the_fixtures_import_their_scaling_qk_norm_and_head_dim():
  llama3, _, _ = interop.convert(GOLDEN / "llama3")
  assert llama3["positional_options"] == {"base": 10000.0, "scaling": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_length": 16}
  qwen3, params, _ = interop.convert(GOLDEN / "qwen3")
  assert qwen3["positional_options"] == {"base": 10000.0, "scaling": "yarn", "factor": 4.0, "original_max_length": 16,
                                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}
  assert qwen3["qk_norm"] and qwen3["head_dim"] == 16 and not qwen3["qkv_bias"]
  assert params["decoder"]["layer_1"]["self_attention"]["key_norm"]["scale"].shape == (16,)


def test_the_older_rope_scaling_key_reads_the_same():
  """Llama 3.1's config.json as transformers 4 wrote it: rope_scaling with `rope_type` (or `type`) and rope_theta."""
  rope = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16)
  for kind in ("rope_type", "type"):
    hf = hf_config("llama3", rope_parameters=None, rope_theta=10000.0, rope_scaling={kind: "llama3", **rope})
    fields = family_of(hf).model_fields(hf)
    assert fields["positional_options"] == interop.convert(GOLDEN / "llama3")[0]["positional_options"]


@pytest.mark.parametrize("family", ["llama3", "qwen3"])
def test_plain_rotary_would_miss_the_fixtures_logits(family):
  """The fixtures exercise the scaling: without it jformer's logits are far from transformers' (which the golden
  tests match within 1e-5)."""
  fields, params, vocabulary = interop.convert(GOLDEN / family)
  golden = np.load(GOLDEN / family / "golden.npz")
  targets = jnp.asarray(jformer_targets(golden["input_ids"], golden["attention_mask"], vocabulary))
  plain = {**fields, "positional_options": {"base": fields["positional_options"]["base"]}}
  logits = LanguageModel(TransformerConfig.from_config(plain)).apply({"params": params}, targets)
  real = golden["attention_mask"] == 1
  assert np.abs(np.asarray(logits)[..., vocabulary.jformer_ids][real] - golden["logits"][real]).max() > 0.05


@pytest.mark.parametrize("family, change, message", [
    ("llama3", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}},
     "llama config: rope_type 'longrope' is not a jformer rotary scaling (it has ['default', 'dynamic', 'linear', "
     "'llama3', 'yarn'])"),
    ("llama3", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
     "llama config: partial_rotary_factor=0.5: jformer rotates every feature of a head"),
    ("llama3", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0, "high_freq_factor": 4.0}},
     "llama config: rope_type 'llama3' without low_freq_factor: add it to rope_parameters"),
    ("qwen3", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "mscale": 1.0,
                                   "mscale_all_dim": 1.0}},
     "qwen3 config: rope_parameters' mscale / mscale_all_dim (DeepSeek's YaRN attention scale) are not imported"),
    ("qwen3", {"use_sliding_window": True}, "qwen3 config: use_sliding_window=True (windows in some layers) is not "
                                            "imported yet"),
    ("qwen3", {"layer_types": ["sliding_attention", "full_attention"]},
     "qwen3 config: layer_types lists ['sliding_attention']: only full_attention layers are imported"),
    ("qwen3", {"attention_bias": True}, "qwen3 config: attention_bias=True (biases on q/k/v/o, none in the MLP) is "
                                        "not imported"),
])
def test_what_jformer_cannot_compute_is_refused_in_one_line(family, change, message):
  hf = hf_config(family, **change)
  with pytest.raises(ValueError, match=re.escape(message)) as error:
    family_of(hf).model_fields(hf)
  assert "\n" not in str(error.value)


def test_each_rope_type_maps_to_its_options():
  """linear: the factor; dynamic: transformers scales from max_position_embeddings (64 here), whatever else the
  config says; yarn without a factor: the ratio of the lengths, an explicit attention_factor kept."""
  def options(**rope):
    hf = hf_config("llama3", rope_parameters={"rope_theta": 1e4, **rope})
    return family_of(hf).model_fields(hf)["positional_options"]

  assert options(rope_type="linear", factor=2) == {"base": 1e4, "scaling": "linear", "factor": 2.0}
  assert options(rope_type="dynamic", factor=2, original_max_position_embeddings=16) == {
      "base": 1e4, "scaling": "dynamic", "factor": 2.0, "original_max_length": 64}
  assert options(rope_type="yarn", original_max_position_embeddings=16, attention_factor=1.5, truncate=False) == {
      "base": 1e4, "scaling": "yarn", "factor": 4.0, "original_max_length": 16, "beta_fast": 32.0, "beta_slow": 1.0,
      "truncate": False, "attention_factor": 1.5}


@pytest.mark.integration  # an import and two exports on run folders.
def test_an_export_writes_the_rope_parameters_back_and_refuses_a_changed_scaling(tmp_path):
  workdir = tmp_path / "run"
  interop.import_hf(str(GOLDEN / "llama3"), workdir)
  interop.export_hf(workdir, tmp_path / "out")
  out = json.loads((tmp_path / "out" / "config.json").read_text())
  assert out["rope_parameters"] == hf_config("llama3")["rope_parameters"]
  config = config_lib.load_run(workdir)
  config.model.positional_options.factor = 4.0
  config_lib.write_run(config, workdir)
  with pytest.raises(ValueError, match=r"the run's model differs from its family's \(llama\) in "
                                       r"\['model.positional_options'\]"):
    interop.export_hf(workdir, tmp_path / "again")
