"""Imported Hugging Face models compute what transformers computes: on small random-weight models of each family
(tests/golden/hf, made by `python -m jformer.interop.make_fixtures` with torch + transformers), jformer's float32
logits equal transformers' within 1e-5 (KL below 1e-6) on right-padded rows, and greedy decoding gives the same
tokens. CI has no torch: the fixtures hold transformers' outputs; where transformers is importable the same tests also
run live against it. Import, export, import is the identity, bit for bit, on the parameters."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import interop
from jformer.decode.generator import generate_ids
from jformer.interop import safetensors_io
from jformer.models import LanguageModel, TransformerConfig
from jformer.ops.tokens import EOS_ID

GOLDEN = pathlib.Path(__file__).parent / "golden" / "hf"
FAMILIES = sorted(path.name for path in GOLDEN.iterdir() if path.is_dir())
SOURCES = ["fixture", "live"]


def transformers_or_skip():
  try:
    import torch  # noqa: F401
    import transformers
  except ImportError:
    pytest.skip("transformers (and torch) not installed: the fixtures' recorded outputs are checked instead")
  return transformers


def hf_outputs(folder: pathlib.Path, source: str) -> dict:
  """The fixture's recorded transformers outputs, or the same computed now (`make_fixtures`' recipe)."""
  golden = dict(np.load(folder / "golden.npz"))
  if source == "live":
    transformers_or_skip()
    from jformer.interop import make_fixtures
    import torch

    model = __import__("transformers").AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
      golden["logits"] = model(torch.tensor(golden["input_ids"]),
                               attention_mask=torch.tensor(golden["attention_mask"])).logits.numpy()
    hf = json.loads((folder / "config.json").read_text())
    start = hf["bos_token_id"] if hf.get("bos_token_id") is not None else hf["eos_token_id"]
    golden["greedy_ids"] = make_fixtures.greedy(model, golden["prompt_ids"], start, golden["greedy_ids"].shape[1],
                                                hf["eos_token_id"])
  return golden


@pytest.fixture(scope="module", params=FAMILIES)
def imported(request):
  """(family name, its folder, jformer model, params, vocabulary map)."""
  folder = GOLDEN / request.param
  fields, params, vocabulary = interop.convert(folder)
  return request.param, folder, LanguageModel(TransformerConfig.from_config(fields)), params, vocabulary


def jformer_targets(input_ids, attention_mask, vocabulary):
  """The LM's targets for transformers' rows [start, x_1 .. x_{n-1}]: [x_1 .. x_{n-1}, any real id], 0-padded (the
  LM feeds its start token itself; the last real position's target only marks it as real, causal attention keeps
  it out of every logit)."""
  targets = np.where(attention_mask[:, 1:] == 1, vocabulary.to_jformer(input_ids[:, 1:]), 0)
  targets = np.pad(targets, ((0, 0), (0, 1)))
  targets[np.arange(len(targets)), attention_mask.sum(1) - 1] = EOS_ID
  return targets


@pytest.mark.parametrize("source", SOURCES)
def test_logits_equal_transformers_with_padding(imported, source):
  name, folder, model, params, vocabulary = imported
  golden = hf_outputs(folder, source)
  real = golden["attention_mask"] == 1
  assert not real.all(), "the rows must include padding"
  targets = jformer_targets(golden["input_ids"], golden["attention_mask"], vocabulary)
  logits = np.asarray(jax.jit(model.apply)({"params": params}, jnp.asarray(targets)))
  # transformers' column h is jformer's column jformer_ids[h]; jformer's extra padding id (a start token that also
  # ends) has its logit masked out, so both softmaxes run over the same tokens.
  np.testing.assert_allclose(logits[..., vocabulary.jformer_ids][real], golden["logits"][real], atol=1e-5, rtol=1e-5)
  p_hf = jax.nn.log_softmax(golden["logits"][real], -1)
  p_jformer = jax.nn.log_softmax(logits[real], -1)[..., vocabulary.jformer_ids]
  kl = np.sum(np.exp(p_hf) * (p_hf - p_jformer), -1)
  assert kl.max() < 1e-6, (name, kl.max())
  assert (logits.shape[-1] == vocabulary.size + 1) == (not model.config.predicts_padding)


@pytest.mark.slow  # a compiled decode loop per family: seconds each.
@pytest.mark.parametrize("source", SOURCES)
def test_greedy_decoding_gives_transformers_tokens(imported, source):
  name, folder, model, params, vocabulary = imported
  golden = hf_outputs(folder, source)
  want = vocabulary.to_jformer(golden["greedy_ids"])
  got = np.asarray(generate_ids(model, params, jnp.asarray(vocabulary.to_jformer(golden["prompt_ids"])),
                                max_new_tokens=want.shape[1], method="greedy"))
  for row_got, row_want in zip(got, want):  # jformer stops at EOS (then pads): compare up to it.
    end = list(row_want).index(EOS_ID) + 1 if EOS_ID in row_want else len(row_want)
    np.testing.assert_array_equal(row_got[:end], row_want[:end], err_msg=name)


def test_import_export_import_is_the_identity(imported, tmp_path):
  name, folder, _, params, _ = imported
  hf = json.loads((folder / "config.json").read_text())
  tensors = interop.to_pretrained_tensors(hf, params)
  original = safetensors_io.read_folder(folder)
  assert set(tensors) == set(original) - {"lm_head.weight"} or set(tensors) == set(original)
  for file in folder.iterdir():
    if file.name != "model.safetensors":
      (tmp_path / file.name).write_bytes(file.read_bytes())
  safetensors_io.write(tmp_path / "model.safetensors", tensors)
  _, again, _ = interop.convert(tmp_path)
  jax.tree.map(np.testing.assert_array_equal, again, params)
  for key, value in tensors.items():  # and the family's own tensors come back as they were (float16 -> float32),
    want = original[key].astype(np.float32)
    if key.endswith("attn.c_attn.bias"):  # but GPT-2's key bias, which softmax ignores (jformer/interop/gpt2.py).
      want = np.concatenate([third if i != 1 else 0 * third for i, third in enumerate(np.split(want, 3))])
    np.testing.assert_array_equal(value, want, err_msg=key)


def test_an_export_loads_in_transformers_with_the_same_logits(imported, tmp_path):
  transformers = transformers_or_skip()
  import torch

  name, folder, _, params, _ = imported
  hf = json.loads((folder / "config.json").read_text())
  for file in folder.iterdir():
    if file.name != "model.safetensors":
      (tmp_path / file.name).write_bytes(file.read_bytes())
  safetensors_io.write(tmp_path / "model.safetensors", interop.to_pretrained_tensors(hf, params), {"format": "pt"})
  golden = np.load(folder / "golden.npz")
  model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
  with torch.no_grad():
    logits = model(torch.tensor(golden["input_ids"]), attention_mask=torch.tensor(golden["attention_mask"])).logits
  real = golden["attention_mask"] == 1
  np.testing.assert_allclose(logits.numpy()[real], golden["logits"][real], atol=1e-5, rtol=1e-5)


def test_safetensors_round_trip_keeps_dtypes_and_bfloat16():
  import ml_dtypes

  tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1.5, -2.25], ml_dtypes.bfloat16),
             "c": np.array([[1, 2]], np.int64)}
  path = pathlib.Path(__import__("tempfile").mkdtemp()) / "x.safetensors"
  safetensors_io.write(path, tensors, {"format": "pt"})
  back = safetensors_io.read(path)
  assert {k: v.dtype for k, v in back.items()} == {k: v.dtype for k, v in tensors.items()}
  jax.tree.map(np.testing.assert_array_equal, back, tensors)
