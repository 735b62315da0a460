"""Data mixtures (`data.mixture`, jformer/data/mixture.py): batches drawn from the sources by weight, each token
counted to the source it came from, the iterator resumed exactly from its state (the counts with it); the refusals
in one line (another task, another tokenizer, a malformed mixture); a two-source language model that resumes
exactly, equal to an uninterrupted run, with per-source tokens and valid bits per byte in its log and results
(integration)."""

from __future__ import annotations

import gzip
import itertools
import json

import numpy as np
import pytest

from helpers import REPO, assert_one_line_error, assert_same_params, final_params, run_cli
from jformer.data import LM_BATCH_KEYS, mixture
from jformer.data.lm_pipeline import TokenizedDocuments
from jformer.ops.tokens import EOS_ID
from jformer.train.loop import train_and_evaluate

MAX_LENGTH = 16


def documents(low: int, count: int, seed: int) -> TokenizedDocuments:
  """`count` documents of 2 to 13 token ids from [low, low + 10) + EOS: one piece each at MAX_LENGTH."""
  rng = np.random.default_rng(seed)
  docs = [np.append(rng.integers(low, low + 10, rng.integers(2, 14)), EOS_ID) for _ in range(count)]
  offsets = np.cumsum([0] + [len(d) for d in docs])
  return TokenizedDocuments(np.concatenate(docs).astype(np.int32), offsets.astype(np.int64))


SOURCES = [documents(10, 40, 0), documents(30, 40, 1)]  # ids 10-19 and 30-39: each token says its source.


def count_by_segment(batches) -> tuple[np.ndarray, np.ndarray]:
  """(tokens, segments) of each source (0, 1) in `batches`, a segment's source read from its token ids (a packed
  piece, or a whole stream row)."""
  tokens, segments = np.zeros(2, np.int64), np.zeros(2, np.int64)
  for batch in batches:
    for row, segmentation in zip(batch["targets"], batch["targets_segmentation"]):
      for segment in np.unique(segmentation[segmentation > 0]):
        inside = segmentation == segment
        ids = row[inside & (row != EOS_ID)]
        assert len(set((ids // 10).tolist())) == 1  # one source per segment.
        source = 0 if ids[0] < 30 else 1
        tokens[source] += inside.sum()
        segments[source] += 1
  return tokens, segments


def mixed(pack="documents"):
  return mixture.mixed_train_dataset(SOURCES, [3.0, 1.0], batch_size=4, max_length=MAX_LENGTH, pack=pack, seed=0)


@pytest.mark.parametrize("pack", ["documents", "stream"])
def test_batches_follow_the_weights_count_each_sources_tokens_and_resume_exactly(pack):
  iterator = iter(mixed(pack))
  batches = [next(iterator) for _ in range(12)]
  assert all(set(batch) == set(LM_BATCH_KEYS) for batch in batches)  # the source numbers are taken out.
  want, segments = count_by_segment(batches)
  if pack == "documents":
    assert 2.4 < segments[0] / segments[1] < 3.6, segments  # weights 3 : 1 of pieces, through first-fit packing.
  else:
    assert segments.tolist() == [36, 12]  # of rows: grain's selection is exact in blocks of 4.
  np.testing.assert_array_equal(iterator.tokens, want)

  again = iter(mixed(pack))
  for _ in range(5):
    next(again)
  state = json.loads(json.dumps(again.get_state()))  # what the checkpoint keeps (grain writes it as JSON).
  resumed = iter(mixed(pack))
  resumed.set_state(state)
  for batch in batches[5:]:
    for key, value in next(resumed).items():
      np.testing.assert_array_equal(value, batch[key])
  np.testing.assert_array_equal(resumed.tokens, iterator.tokens)


@pytest.fixture
def project(repo_root, tmp_path, monkeypatch):
  monkeypatch.chdir(repo_root)
  return tmp_path


TEXT, TEXT_B = {"dataset": "text", "weight": 3}, {"dataset": "text", "path": "other", "weight": 1}


@pytest.mark.parametrize("mix, extra, fragments", [
    ({"a": TEXT, "b": {"dataset": "mqar", "weight": 1}}, [],
     ["data.mixture.b (dataset 'mqar') holds a synthetic task's rows, whose token ids are its own (another "
      "tokenizer), but the sources of a mixture share one task and one tokenizer: documents for a language model "
      "(model.architecture='lm'), tokenized with the run's SentencePiece vocabulary; mix document datasets"]),
    ({"a": TEXT, "b": TEXT_B}, ["--config.model.architecture=transformer"],
     ["data.mixture mixes documents for a language model (model.architecture='lm'), tokenized with the run's "
      "SentencePiece vocabulary, not rows for model.architecture='transformer'; set model.architecture='lm'"]),
    ({"a": TEXT}, [], ["data.mixture names one source; a mixture needs two or more (one dataset: data.dataset)"]),
    ({"a": TEXT, "b": {"dataset": "text", "weight": 0}}, [], ["data.mixture.b needs a 'dataset' name and a "
                                                             "'weight' above 0"]),
    ({"a": TEXT, "b": {**TEXT_B, "seed": 3}}, [], ["data.mixture.b sets ['seed']; a source sets only ['dataset', "
                                                   "'path', 'weight']"]),
    ({"a": TEXT, "b": {"dataset": "wmt99", "weight": 1}}, [], ["unknown dataset 'wmt99'"]),
    ({"a": TEXT, "b": TEXT_B}, ["--config.data.path=corpus"], ["data.path='corpus' is not read with data.mixture"]),
])
def test_a_bad_mixture_is_refused_in_one_line_before_anything_is_written(project, capsys, mix, extra, fragments):
  status, err = run_cli(["train", "--config=configs/small.py", f"--workdir={project / 'run'}",
                         "--config.model.architecture=lm", f"--config.data.mixture={mix}", *extra], capsys)
  assert_one_line_error(status, err, "jformer train: error: invalid config: ", *fragments)
  assert list(project.iterdir()) == []


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
  """Two document folders: English and German lines of the bundled corpus, two lines a document."""
  root = tmp_path_factory.mktemp("mixture")
  for name, side in (("en", "src"), ("de", "tgt")):
    with gzip.open(REPO / "jformer" / "data" / "corpora" / "gettext_en_de" / f"train.{side}.gz", "rt",
                   encoding="utf-8") as f:
      lines = (line.strip() for line in f if line.strip())
      folder = root / name
      folder.mkdir()
      for split, count in (("train", 100), ("valid", 8), ("test", 8)):
        docs = ["\n".join(itertools.islice(lines, 2)) for _ in range(count)]
        (folder / f"{split}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
  return root


def mixture_config(corpora, **extra):
  from jformer import config as config_lib

  overrides = {"model.architecture": "lm", "data.data_dir": str(corpora / "tfds"),
               "data.mixture": {"en": {"dataset": "text", "path": str(corpora / "en"), "weight": 3},
                                "de": {"dataset": "text", "path": str(corpora / "de"), "weight": 1}},
               "data.max_length": 16, "data.batch_size": 8, "data.eval_batch_size": 8, "model.vocab_size": 400,
               "model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64, "model.num_decoder_layers": 1,
               "model.max_length": 32, "optimizer.warmup_steps": 10, "train.steps": 6, "train.log_every": 2,
               "train.eval_every": 3, "train.checkpoint_every": 3}
  return config_lib.load(REPO / "configs" / "small.py", {**overrides, **extra})


@pytest.mark.integration  # three short runs.
def test_a_two_source_mixture_resumes_exactly_with_per_source_tokens_and_bits_per_byte(corpora, tmp_path, capsys):
  whole, resumed = tmp_path / "whole", tmp_path / "resumed"
  train_and_evaluate(mixture_config(corpora), str(whole))
  out = capsys.readouterr().out
  results = json.loads((whole / "results.json").read_text())
  tokens = {name: results[f"train_tokens/{name}"] for name in ("de", "en")}
  assert 2.0 < tokens["en"] / tokens["de"] < 4.0, tokens  # weights 3 : 1 of pieces.
  assert f"| tokens de {tokens['de']:,}, en {tokens['en']:,}" in out
  each = {name: results[f"eval_bits_per_byte/{name}"] for name in ("de", "en")}
  assert min(each.values()) < results["eval_bits_per_byte"] < max(each.values())  # all sources: between them.
  assert f"bits per byte {results['eval_bits_per_byte']:.4f} (de {each['de']:.4f}, en {each['en']:.4f})" in out

  train_and_evaluate(mixture_config(corpora, **{"train.steps": 3}), str(resumed))
  train_and_evaluate(mixture_config(corpora), str(resumed))
  assert "resumed from step 3" in capsys.readouterr().out
  (step_a, params_a), (step_b, params_b) = final_params(whole), final_params(resumed)
  assert step_a == step_b == 6
  assert_same_params(params_a, params_b, atol=1e-6)
  again = json.loads((resumed / "results.json").read_text())
  for key in ("train_tokens/de", "train_tokens/en"):
    assert again[key] == results[key], key
  for key in ("train_loss", "eval_bits_per_byte", "eval_bits_per_byte/de", "eval_bits_per_byte/en"):
    assert again[key] == pytest.approx(results[key], abs=1e-6), key


@pytest.mark.integration  # prepares a translation corpus.
def test_a_source_of_translation_pairs_is_refused_in_one_line(corpora, tiny_corpus, tmp_path, capsys, monkeypatch):
  monkeypatch.chdir(REPO)
  mix = {"en": {"dataset": "text", "path": str(corpora / "en"), "weight": 1},
         "pairs": {"dataset": "parallel_text", "path": str(tiny_corpus), "weight": 1}}
  status, err = run_cli(["train", "--config=configs/small.py", f"--workdir={tmp_path / 'run'}",
                         "--config.model.architecture=lm", f"--config.data.mixture={mix}",
                         f"--config.data.data_dir={tmp_path / 'tfds'}"], capsys)
  assert_one_line_error(status, err, "jformer train: error: data.mixture.pairs (dataset 'parallel_text') holds "
                        "translation pairs (another task), but the sources of a mixture share one task and one "
                        "tokenizer")
