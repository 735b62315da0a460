"""`jformer import-hf` from a local folder gives a run every command works on: `generate` continues prompts with the
family's tokenizer, `train` (no --config: the workdir's own) fine-tunes it and resumes, `evaluate` scores it, and
`export-hf` writes it back as a folder whose re-import is the same parameters, bit for bit."""

from __future__ import annotations

import io
import json
import pathlib
import sys

import jax
import numpy as np
import pytest
from flax import traverse_util

from jformer import checkpoint, interop, main
from jformer.data.pretrained_vocab import PretrainedTokenizer

pytestmark = pytest.mark.integration  # the commands end to end on run folders.

LLAMA = pathlib.Path(__file__).parent / "golden" / "hf" / "llama"


def run(argv, capsys, stdin: bytes = b"") -> str:
  sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
  try:
    main.main([str(a) for a in argv])
  finally:
    sys.stdin = sys.__stdin__
  return capsys.readouterr().out


def refused(argv) -> str:
  with pytest.raises(SystemExit) as exit_info:
    main.main([str(a) for a in argv])
  return exit_info.value.code


def test_import_generate_fine_tune_resume_evaluate_export(tmp_path, text_corpus, capsys):
  workdir = tmp_path / "llama"
  out = run(["import-hf", LLAMA, f"--workdir={workdir}", f"--config.data.path={text_corpus}",
             "--config.data.max_length=32", "--config.data.batch_size=8", "--config.data.eval_batch_size=8",
             "--config.train.steps=2", "--config.train.checkpoint_every=2", "--config.train.eval_every=2"], capsys)
  assert f"imported {LLAMA} -> {workdir}: 2 layers, d_model 32, vocabulary 272" in out
  fields, params, vocabulary = interop.convert(LLAMA)
  with checkpoint.Checkpointer(workdir / "checkpoints", read_only=True) as ckpt:
    assert ckpt.all_steps() == [0]
  jax.tree.map(np.testing.assert_array_equal, checkpoint.load_run_params(workdir), params)

  tokenizer = PretrainedTokenizer.from_file(workdir / "vocab" / "pretrained_vocab.json")
  ids = tokenizer.encode("The lighthouse keeper")
  assert ids[-1] == 1 and 0 not in ids and tokenizer.decode(ids) == "The lighthouse keeper"
  generated = run(["generate", f"--workdir={workdir}", "--method=greedy", "--max_new_tokens=5"], capsys,
                  b"The lighthouse keeper\n").splitlines()
  assert len(generated) == 1

  assert refused(["import-hf", LLAMA, f"--workdir={workdir}"]) == (
      f"jformer import-hf: error: {workdir} already holds a run; import into a new --workdir")
  assert refused(["import-hf", LLAMA, f"--workdir={tmp_path / 'other'}", "--config.model.d_model=64"]).startswith(
      "jformer import-hf: error: ['model.d_model'] come from the pretrained model's config.json")

  out = run(["train", f"--workdir={workdir}"], capsys)  # fine-tunes from step 0: the imported parameters.
  assert "resumed from step 0" in out and "done: step 2" in out
  tuned = checkpoint.load_run_params(workdir)
  assert not np.array_equal(tuned["embedding"]["embedding"], params["embedding"]["embedding"])
  out = run(["train", f"--workdir={workdir}", "--config.train.steps=4"], capsys)
  assert "resumed from step 2" in out and "done: step 4" in out
  out = run(["evaluate", f"--workdir={workdir}"], capsys)
  assert "bits per byte" in out

  exported = tmp_path / "exported"
  out = run(["export-hf", f"--workdir={workdir}", exported], capsys)
  assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in exported.iterdir()}
  assert json.loads((exported / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
  _, again, _ = interop.convert(exported)
  jax.tree.map(np.testing.assert_array_equal, again, checkpoint.load_run_params(workdir))
  assert refused(["export-hf", f"--workdir={workdir}", exported]) == (
      f"jformer export-hf: error: {exported} is not empty; export into a new folder")


def test_attention_surgery_on_an_imported_model_transfers_then_fine_tunes(tmp_path, text_corpus, capsys):
  """The imported Llama with hedgehog in layer 0 (softmax kept in layer 1): `train --config=<its config.json>
  --config.train.initialize_from=<it>` copies every parameter it has, 2 transfer steps move only the feature maps,
  2 fine-tuning steps move the rest; a vocabulary other than the source's is refused in one line."""
  source = tmp_path / "llama"
  run(["import-hf", LLAMA, f"--workdir={source}", f"--config.data.path={text_corpus}",
       "--config.data.max_length=32", "--config.data.batch_size=8", "--config.data.eval_batch_size=8"], capsys)
  surgery = [f"--config={source / 'config.json'}", f"--config.train.initialize_from={source}",
             "--config.model.layer_kinds.linear.attention=hedgehog", "--config.model.layer_kinds.global.attention=auto",
             "--config.model.layer_pattern=('linear', 'global')", "--config.train.attention_transfer=2",
             "--config.train.steps=2", "--config.train.checkpoint_every=2", "--config.train.eval_every=2"]
  converted = tmp_path / "converted"
  message = refused(["train", f"--workdir={tmp_path / 'wrong_vocab'}", *surgery])
  vocab = f"--config.data.vocab_path={source / 'vocab' / 'pretrained_vocab.json'}"
  assert message == (f"jformer train: error: train.initialize_from={source}: its parameters belong to its "
                     f"vocabulary; set {vocab}")
  out = run(["train", f"--workdir={converted}", *surgery, vocab], capsys)
  assert "initialized from" in out and "new (initial values): decoder/layer_0/self_attention/hedgehog/key_map" in out
  imported = traverse_util.flatten_dict(checkpoint.load_run_params(source), sep="/")
  after_transfer = traverse_util.flatten_dict(checkpoint.load_run_params(converted), sep="/")
  moved = {path for path in imported if not np.array_equal(imported[path], after_transfer[path])}
  assert moved == set() and set(after_transfer) - set(imported) == {
      "decoder/layer_0/self_attention/hedgehog/query_map", "decoder/layer_0/self_attention/hedgehog/key_map"}
  out = run(["train", f"--workdir={converted}", "--config.train.steps=4"], capsys)  # the run's own config.
  assert "resumed from step 2" in out and "done: step 4" in out
  tuned = traverse_util.flatten_dict(checkpoint.load_run_params(converted), sep="/")
  assert all(not np.array_equal(imported[path], tuned[path]) for path in imported if "norm" not in path)


def test_an_imported_marian_translates_fine_tunes_on_pairs_resumes_and_exports(tmp_path, tiny_corpus, capsys):
  """`import-hf` of the Marian fixture gives a translation run: `translate` writes what greedy translation of the
  golden-checked model gives (source cut by source.spm, output joined by target.spm), `train` fine-tunes it on
  pairs (targets cut by target.spm) and resumes, `export-hf` writes it back bit for bit."""
  from jformer.decode.translator import translate_ids
  from jformer.models import Transformer, TransformerConfig

  marian, workdir = LLAMA.parent / "marian", tmp_path / "marian"
  out = run(["import-hf", marian, f"--workdir={workdir}", f"--config.data.path={tiny_corpus}",
             "--config.data.max_length=32", "--config.data.batch_size=8", "--config.data.eval_batch_size=8",
             "--config.train.steps=2", "--config.train.checkpoint_every=2", "--config.train.eval_every=2"], capsys)
  assert f"imported {marian} -> {workdir}: 3+2 layers, d_model 32, vocabulary 53" in out
  fields, params, _ = interop.convert(marian)
  tokenizer = PretrainedTokenizer.from_file(workdir / "vocab" / "pretrained_vocab.json")
  sentence = "The keeper lit the lamp."
  source = np.array([tokenizer.encode(sentence)])
  want = translate_ids(Transformer(TransformerConfig.from_config(fields)), params, source, max_decode_len=64,
                       method="greedy", max_extra_length=50)[0]
  got = run(["translate", f"--workdir={workdir}", "--config.decode.method=greedy"], capsys, f"{sentence}\n".encode())
  assert got.splitlines() == [tokenizer.decode(np.asarray(want))] and got.strip()

  out = run(["train", f"--workdir={workdir}"], capsys)
  assert "resumed from step 0" in out and "done: step 2" in out and "BLEU" in out
  out = run(["train", f"--workdir={workdir}", "--config.train.steps=4"], capsys)
  assert "resumed from step 2" in out and "done: step 4" in out
  tuned = checkpoint.load_run_params(workdir)
  assert not np.array_equal(tuned["decoder"]["final_logits_bias"], params["decoder"]["final_logits_bias"])
  exported = tmp_path / "exported"
  run(["export-hf", f"--workdir={workdir}", exported], capsys)
  assert {"source.spm", "target.spm", "vocab.json", "model.safetensors"} <= {p.name for p in exported.iterdir()}
  _, again, _ = interop.convert(exported)
  jax.tree.map(np.testing.assert_array_equal, again, tuned)
