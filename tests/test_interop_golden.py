"""Imported Hugging Face models compute what transformers computes: on small random-weight models of each family
(tests/golden/hf, made by `python tests/golden/make_fixtures.py` with torch + transformers), jformer's float32
logits equal transformers' within 1e-5 (KL below 1e-6) on right-padded rows (Marian: padded sources and targets),
and greedy decoding (Marian: greedy translation) gives the same tokens; Marian's tokenizer gives MarianTokenizer's
ids. CI has no torch: the fixtures hold transformers' outputs; where transformers is importable the same tests also
run live against it. Import, export, import is the identity, bit for bit, on the parameters."""

import json
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jformer import interop
from jformer.data.pretrained_vocab import PretrainedTokenizer
from jformer.decode.generator import generate_ids
from jformer.decode.translator import translate_ids
from jformer.interop import hf as hf_lib
from jformer.interop import safetensors_io
from jformer.interop.family import family_of
from jformer.models import LanguageModel, Transformer, TransformerConfig
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


def hf_model(folder: pathlib.Path):
  """transformers' float32 model of the folder (a causal LM, or Marian's encoder-decoder)."""
  transformers = transformers_or_skip()
  import torch

  hf = json.loads((folder / "config.json").read_text())
  kind = transformers.AutoModelForSeq2SeqLM if hf.get("is_encoder_decoder") else transformers.AutoModelForCausalLM
  return kind.from_pretrained(folder, dtype=torch.float32).eval()


def hf_logits(model, golden: dict) -> np.ndarray:
  """transformers' logits `[B, T, V]` on the fixture's padded rows (Marian: on its padded sources too)."""
  import torch

  rows = {"attention_mask": torch.tensor(golden["attention_mask"])}
  if "source_ids" in golden:
    rows = {"attention_mask": torch.tensor(golden["source_mask"]),
            "decoder_input_ids": torch.tensor(golden["input_ids"]), "decoder_attention_mask": rows["attention_mask"]}
  with torch.no_grad():
    return model(torch.tensor(golden.get("source_ids", golden["input_ids"])), **rows).logits.numpy()


def hf_outputs(folder: pathlib.Path, source: str) -> dict:
  """The fixture's recorded transformers outputs, or the same computed now (`make_fixtures`' recipe)."""
  golden = dict(np.load(folder / "golden.npz"))
  if source == "live":
    from golden import make_fixtures  # tests/golden/make_fixtures.py (tests/ is on the path under pytest)

    model = hf_model(folder)
    golden["logits"] = hf_logits(model, golden)
    hf = json.loads((folder / "config.json").read_text())
    steps = golden["greedy_ids"].shape[1]
    if hf.get("is_encoder_decoder"):
      golden["greedy_ids"] = make_fixtures.greedy_translations(model, golden["prompt_ids"], hf["pad_token_id"], steps)
    else:
      start = hf["bos_token_id"] if hf.get("bos_token_id") is not None else hf["eos_token_id"]
      golden["greedy_ids"] = make_fixtures.greedy(model, golden["prompt_ids"], start, steps, hf["eos_token_id"])
  return golden


@pytest.fixture(scope="module", params=FAMILIES)
def imported(request):
  """(family name, its folder, jformer model, params, vocabulary map)."""
  folder = GOLDEN / request.param
  fields, params, vocabulary = interop.convert(folder)
  config = TransformerConfig.from_config(fields)
  model = LanguageModel(config) if config.architecture == "lm" else Transformer(config)
  return request.param, folder, model, params, vocabulary


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
  sources = [vocabulary.to_jformer(golden["source_ids"])] if "source_ids" in golden else []  # <pad>: jformer's 0.
  logits = np.asarray(jax.jit(model.apply)({"params": params}, *map(jnp.asarray, sources), jnp.asarray(targets)))
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
  prompts = jnp.asarray(vocabulary.to_jformer(golden["prompt_ids"]))
  if model.is_encoder_decoder:  # the prompts are sources, translated.
    got = np.asarray(translate_ids(model, params, prompts, max_decode_len=want.shape[1], method="greedy"))
  else:
    got = np.asarray(generate_ids(model, params, prompts, max_new_tokens=want.shape[1], method="greedy"))
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
  for key, value in tensors.items():  # and the family's own tensors come back as they were (float16 kept),
    want = original[key]
    if key.endswith("attn.c_attn.bias"):  # but GPT-2's key bias, which softmax ignores (jformer/interop/gpt2.py).
      want = np.concatenate([third if i != 1 else 0 * third for i, third in enumerate(np.split(want, 3))])
    assert value.dtype == want.dtype == np.float16, key
    np.testing.assert_array_equal(value, want, err_msg=key)


def test_an_export_loads_in_transformers_with_the_same_logits(imported, tmp_path):
  transformers_or_skip()
  name, folder, _, params, _ = imported
  hf = json.loads((folder / "config.json").read_text())
  for file in folder.iterdir():
    if file.name != "model.safetensors":
      (tmp_path / file.name).write_bytes(file.read_bytes())
  safetensors_io.write(tmp_path / "model.safetensors", interop.to_pretrained_tensors(hf, params),
                       {"format": "pt"})
  golden = dict(np.load(folder / "golden.npz"))
  logits = hf_logits(hf_model(tmp_path), golden)
  real = golden["attention_mask"] == 1
  np.testing.assert_allclose(logits[real], golden["logits"][real], atol=1e-5, rtol=1e-5)


def test_safetensors_round_trip_keeps_dtypes_and_bfloat16():
  import ml_dtypes

  tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1.5, -2.25], ml_dtypes.bfloat16),
             "c": np.array([[1, 2]], np.int64)}
  path = pathlib.Path(__import__("tempfile").mkdtemp()) / "x.safetensors"
  safetensors_io.write(path, tensors, {"format": "pt"})
  back = safetensors_io.read(path)
  assert {k: v.dtype for k, v in back.items()} == {k: v.dtype for k, v in tensors.items()}
  jax.tree.map(np.testing.assert_array_equal, back, tensors)


def test_marian_tokenizer_gives_marian_tokenizers_ids(tmp_path):
  """Source texts cut by source.spm, targets by target.spm, each piece's id from vocab.json then renumbered, </s>
  last: the ids transformers' MarianTokenizer gave (recorded in the fixture); decoding gives the text back."""
  folder = GOLDEN / "marian"
  golden = np.load(folder / "golden.npz")
  _, _, vocabulary = interop.convert(folder)
  kind, contents = hf_lib._tokenizer_file(folder)
  PretrainedTokenizer.write(tmp_path / "vocab.json", kind=kind, tokenizer=contents, vocabulary=vocabulary)
  tokenizer = PretrainedTokenizer.from_file(tmp_path / "vocab.json")
  texts = [str(text) for text in golden["texts"]]
  for got, recorded in ((tokenizer.encode_batch(texts), golden["text_ids"]),
                        (tokenizer.encode_targets_batch(texts), golden["target_text_ids"])):
    want = [[i for i in row if i != 0] for row in vocabulary.to_jformer(recorded).tolist()]  # <pad> is jformer's 0.
    assert got == want
  assert tokenizer.encode_batch(texts) != tokenizer.encode_targets_batch(texts)  # two models: the sides differ.
  assert [tokenizer.decode(ids) for ids in tokenizer.encode_targets_batch(texts)] == texts


@pytest.mark.parametrize("change, message", [
    ({"decoder_vocab_size": 60}, "marian config: separate source and target vocabularies are not imported"),
    ({"decoder_ffn_dim": 128}, "marian config: encoder_ffn_dim=64 != decoder_ffn_dim=128"),
    ({"normalize_before": True}, "marian config: a pre-norm block or an embedding norm is not imported"),
    ({"decoder_start_token_id": 0}, "marian config: decoder_start_token_id=0 is not pad_token_id=52"),
    ({"activation_function": "gelu"}, "marian config: activation_function='gelu' is not one of"),
])
def test_marian_refuses_what_jformer_cannot_hold(change, message):
  """A Marian config jformer's Transformer cannot compute is refused in one line naming the key."""
  hf = {**json.loads((GOLDEN / "marian" / "config.json").read_text()), **change}
  with pytest.raises(ValueError, match=re.escape(message)):
    family_of(hf).model_fields(hf)


def test_marian_tokenizer_with_separate_vocabularies_is_refused(tmp_path):
  """jformer shares one vocabulary between the sides: a Marian tokenizer with two (target_vocab.json,
  separate_vocabs) is refused, in one line, before anything is written."""
  for name in hf_lib.MARIAN_TOKENIZER:
    (tmp_path / name).write_bytes((GOLDEN / "marian" / name).read_bytes())
  assert hf_lib._tokenizer_file(tmp_path)[0] == "marian"
  (tmp_path / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": True}))
  with pytest.raises(ValueError, match="a Marian tokenizer with separate source and target vocabularies"):
    hf_lib._tokenizer_file(tmp_path)


@pytest.mark.parametrize("change, message", [
    ({"hidden_activation": "gelu"}, "gemma2 config: hidden_activation='gelu' (jformer's geglu is GELU's tanh"),
    ({"attention_bias": True}, "gemma2 config: attention_bias=True (biases on q/k/v/o but not the MLP)"),
    ({"use_bidirectional_attention": True}, "gemma2 config: use_bidirectional_attention=True"),
    ({"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]},
     "gemma2 config: layer_types holds ['chunked_attention']"),
    ({"layer_types": ["sliding_attention", "full_attention"]},
     "gemma2 config: layer_types names 2 layers, num_hidden_layers=3"),
    ({"sliding_window": None}, "gemma2 config: sliding_window=None with sliding layers"),
    ({"rope_parameters": {"rope_type": "longrope", "factor": 2.0, "rope_theta": 10000.0}},
     "gemma2 config: rope_type 'longrope' is not a jformer rotary scaling"),
])
def test_gemma2_refuses_what_jformer_cannot_hold(change, message):
  """A Gemma 2 config jformer's block cannot compute is refused in one line naming the field."""
  hf = {**json.loads((GOLDEN / "gemma2" / "config.json").read_text()), **change}
  with pytest.raises(ValueError, match=re.escape(message)):
    family_of(hf).model_fields(hf)


@pytest.mark.parametrize("types, pattern", [
    (None, ("local", "global")),  # transformers' default: sliding where the index is even.
    (["full_attention"] * 3, ("global",)),
    ((["sliding_attention"] * 5 + ["full_attention"]) * 2, ("local",) * 5 + ("global",)),
])
def test_gemma2_layer_types_become_the_shortest_layer_pattern(types, pattern):
  hf = json.loads((GOLDEN / "gemma2" / "config.json").read_text())
  hf.update(layer_types=types, num_hidden_layers=len(types or [0] * 3))
  fields = family_of(hf).model_fields(hf)
  assert fields["layer_pattern"] == pattern
  assert set(fields["layer_kinds"]) == set(pattern)
  assert fields["layer_kinds"].get("local", {}).get("attention_options") in (None, {"window_size": 4})
  TransformerConfig.from_config({**fields, "vocab_size": 272}).validate()


def test_gemma2_fields_left_out_take_transformers_defaults():
  """Gemma2Config's defaults: soft-caps 50 (attention) and 30 (logits), window 4096, query_pre_attn_scalar 256."""
  hf = json.loads((GOLDEN / "gemma2" / "config.json").read_text())
  for key in ("attn_logit_softcapping", "final_logit_softcapping", "sliding_window", "query_pre_attn_scalar"):
    del hf[key]
  fields = family_of(hf).model_fields(hf)
  assert (fields["attention_logit_softcap"], fields["final_logit_softcap"], fields["attention_scale_dim"]) == (
      50.0, 30.0, 256.0)
  assert fields["layer_kinds"]["local"]["attention_options"] == {"window_size": 4096}


def test_gemma2_with_an_untied_output_embedding_round_trips(tmp_path):
  """tie_word_embeddings=False: lm_head.weight becomes the output embedding and comes back bit for bit."""
  folder = GOLDEN / "gemma2"
  hf = {**json.loads((folder / "config.json").read_text()), "tie_word_embeddings": False}
  (tmp_path / "config.json").write_text(json.dumps(hf))
  tensors = dict(safetensors_io.read_folder(folder))  # a lazy mapping: copied to add a tensor.
  tensors["lm_head.weight"] = (tensors["model.embed_tokens.weight"][::-1] * 2).astype(np.float32)
  safetensors_io.write(tmp_path / "model.safetensors", tensors)
  fields, params, vocabulary = interop.convert(tmp_path)
  assert not fields["tie_output_embedding"]
  output = params["decoder"]["output_embedding"]["embedding"]
  np.testing.assert_array_equal(output[vocabulary.jformer_ids], tensors["lm_head.weight"])
  back = interop.to_pretrained_tensors(hf, params)
  assert set(back) == set(tensors)
  np.testing.assert_array_equal(back["lm_head.weight"], tensors["lm_head.weight"])
