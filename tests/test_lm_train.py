"""A language model end to end on a tiny text corpus: train, exact resume, results.json, bits per byte against a
direct count on the real pipeline, and `jformer evaluate` at another context length."""

import json
import math
import subprocess
import sys

import jax
import pytest
from helpers import REPO, assert_same_params, direct_nats, final_params

from jformer import checkpoint, data, main, tasks
from jformer import config as config_lib
from jformer.ops.tokens import EOS_ID
from jformer.train.loop import train_and_evaluate

pytestmark = pytest.mark.integration  # a trained run.


def lm_config(corpus, **extra):
  """A tiny LM on `corpus` (prepared once, in its folder's tfds/)."""
  overrides = {"model.architecture": "lm", "data.dataset": "text", "data.path": str(corpus), "data.pack": "documents",
               "data.data_dir": str(corpus.parent / "tfds"),
               "data.max_length": 16, "data.batch_size": 8, "data.eval_batch_size": 8, "model.vocab_size": 400,
               "model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64, "model.num_decoder_layers": 1,
               "model.max_length": 32, "model.positional": "learned", "optimizer.warmup_steps": 10,
               "train.steps": 6, "train.log_every": 2, "train.eval_every": 3, "train.checkpoint_every": 3,
               "train.eval_lengths": "(8, 32)"}
  overrides.update(extra)
  return config_lib.load(REPO / "configs" / "small.py", overrides)


@pytest.fixture(scope="module")
def lm_run(text_corpus, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("lm_run")
  return workdir, train_and_evaluate(lm_config(text_corpus), str(workdir))


@pytest.mark.slow  # about 30 s: two more runs.
def test_lm_trains_resumes_exactly_and_reports_bits_per_byte(lm_run, text_corpus, tmp_path, capsys):
  workdir, results = lm_run
  saved = json.loads((workdir / "results.json").read_text())
  for key in ("eval_loss", "eval_perplexity", "eval_bits_per_byte", "xz_bits_per_byte", "test_bits_per_byte",
              "test_bits_per_byte_at", "tokens_per_second", "step_temp_mib", "train_seconds"):
    assert key in saved, key
  assert "bleu" not in saved and saved["step"] == 6
  assert set(saved["test_bits_per_byte_at"]) == {"8", "32"}
  at = [saved["test_bits_per_byte"], saved["test_bits_per_byte_at"]["8"], saved["test_bits_per_byte_at"]["32"]]
  assert all(2 < value < 8 for value in at) and len(set(at)) == 3  # context 16 (data.max_length), 8 and 32 differ.
  assert 1.5 < saved["xz_bits_per_byte"] < 8 and saved["eval_perplexity"] == pytest.approx(
      math.exp(saved["eval_loss"]))
  assert list((workdir / "tensorboard").iterdir())

  resumed = tmp_path / "resumed"
  train_and_evaluate(lm_config(text_corpus, **{"train.steps": 3}), str(resumed))
  train_and_evaluate(lm_config(text_corpus), str(resumed))
  out = capsys.readouterr().out
  assert "resumed from step 3" in out and "| bits per byte " in out
  assert f"eval bits per byte {saved['eval_bits_per_byte']:.4f} (xz -9: {saved['xz_bits_per_byte']:.4f})" in out
  step_a, params_a = final_params(workdir)
  step_b, params_b = final_params(resumed)
  assert step_a == step_b == 6
  assert_same_params(params_a, params_b, atol=1e-6)
  again = json.loads((resumed / "results.json").read_text())
  for key in ("train_loss", "eval_bits_per_byte", "test_bits_per_byte"):
    assert again[key] == pytest.approx(saved[key], abs=1e-6), key


def test_bits_per_byte_of_the_run_is_its_summed_nll_over_the_bytes(lm_run, text_corpus):
  """The run's valid bits per byte against a direct count: each valid document of the text file, tokenized with the
  run's vocabulary + EOS, scored piece by piece from full logits; over its UTF-8 bytes + 1 per document."""
  workdir, results = lm_run
  config = config_lib.load_run(workdir)
  tokenizer = data.load_tokenizer(config, workdir)
  model = tasks.build_model(config)
  params = checkpoint.load_run_params(workdir)
  documents = (text_corpus / "valid.txt").read_text(encoding="utf-8").rstrip("\n").split("\n\n")
  assert len(documents) == 8
  nats, apply = 0.0, jax.jit(model.apply)
  for text in documents:
    ids = tokenizer.encode(text)
    assert ids[-1] == EOS_ID
    nats += direct_nats(apply, params, ids, 16)
  num_bytes = sum(len(text.encode("utf-8")) + 1 for text in documents)
  assert results["eval_bits_per_byte"] == pytest.approx(nats / math.log(2) / num_bytes, rel=1e-5)


def test_evaluate_an_lm_run_at_other_lengths(lm_run, repo_root, capsys):
  workdir, results = lm_run
  events = b"".join(path.read_bytes() for path in (workdir / "tensorboard").rglob("*") if path.is_file())
  assert b"eval/bits_per_byte" in events and b"test/bits_per_byte" in events and b"bleu" not in events
  main.main(["evaluate", f"--workdir={workdir}"])
  valid = json.loads((workdir / "evaluate_valid_16.json").read_text())
  assert valid["bits_per_byte"] == pytest.approx(results["eval_bits_per_byte"], rel=1e-5)
  assert valid["xz_bits_per_byte"] == pytest.approx(results["xz_bits_per_byte"])
  assert "xz bits per byte" in capsys.readouterr().out
  result = subprocess.run([sys.executable, "-m", "jformer.main", "evaluate", f"--workdir={workdir}", "--split=test",
                           "--config.data.max_length=32"], cwd=repo_root, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr
  test = json.loads((workdir / "evaluate_test_32.json").read_text())
  assert test["bits_per_byte"] == pytest.approx(results["test_bits_per_byte_at"]["32"], rel=1e-5)
  assert "xz_bits_per_byte" not in test and "bleu" not in test
  assert result.stdout.startswith("test at 32 tokens (auto checkpoint): loss ")
  with pytest.raises(SystemExit, match=r"data.pack='stream' \(the run has 'documents'\)"):
    main.main(["evaluate", f"--workdir={workdir}", "--config.data.pack=stream"])


def test_an_lm_run_under_pmap_ends_with_the_test_of_one_device(text_corpus, tmp_path):
  """The final test (bits per byte at each context length) runs the pmapped eval step on the final parameters laid
  out one copy per device, and scores what one device scores; no dropout, so both runs train alike."""
  same = {"model.dropout_rate": 0.0, "train.steps": 3, "train.eval_every": 3, "train.checkpoint_every": 3}
  one = train_and_evaluate(lm_config(text_corpus, **same), str(tmp_path / "one"))
  replicated = train_and_evaluate(lm_config(text_corpus, **same, **{"parallel.mode": "pmap"}), str(tmp_path / "pmap"))
  assert jax.local_device_count() == 8 and replicated["finished"]
  assert replicated["test_bits_per_byte"] == pytest.approx(one["test_bits_per_byte"], abs=1e-4)
  for length, value in one["test_bits_per_byte_at"].items():
    assert replicated["test_bits_per_byte_at"][length] == pytest.approx(value, abs=1e-4), length
