"""Language-modelling data: the "text" dataset (documents separated by blank lines, tfds ArrayRecord), tfds LM
datasets (mocked), DocumentSource sharding, the vocabulary's training texts, packing ("documents": no attention
across documents; "stream": contiguous rows), eval batches that hold every token once, bytes for bits per byte,
exact resume and per-host shards (`jformer.data.lm_pipeline`)."""

from __future__ import annotations

import gzip
import itertools

import numpy as np
import pytest
import tensorflow_datasets as tfds
from jax.experimental import multihost_utils
from helpers import REPO

from jformer import config as config_lib
from jformer.data import checks, documents, lm_pipeline, pipeline, preparation, sources, workdir
from jformer.data.lm_pipeline import LM_BATCH_KEYS, TokenizedDocuments, lm_train_dataset
from jformer.data.tokenizer import train_tokenizer
from jformer.ops import masks

SPLIT_SIZES = {"train": 60, "valid": 7, "test": 5}


def _corpus_documents() -> dict[str, list[str]]:
  """Documents of 1 to 5 lines of the bundled corpus's English side, per split (real text, some non-ASCII)."""
  with gzip.open(REPO / "jformer" / "data" / "corpora" / "gettext_en_de" / "train.src.gz", "rt",
                 encoding="utf-8") as f:
    lines = (line.rstrip("\n") for line in f if line.strip())
    rng = np.random.default_rng(0)
    return {split: ["\n".join(itertools.islice(lines, int(rng.integers(1, 6)))) for _ in range(n)]
            for split, n in SPLIT_SIZES.items()}


DOCS = _corpus_documents()


def _write_corpus(folder, docs=DOCS, gzip_splits=("valid",)) -> str:
  """`<split>.txt` (gzipped for `gzip_splits`) with documents between 1 to 3 blank lines (one only spaces) and blank
  lines before the first and after the last; returns the folder."""
  folder.mkdir(parents=True, exist_ok=True)
  for split, split_docs in docs.items():
    separators = itertools.cycle(["\n\n", "\n\n\n", "\n   \n\n"])
    data = ("\n\n" + "".join(doc + next(separators) for doc in split_docs) + "\n").encode()
    name = folder / f"{split}.txt"
    if split in gzip_splits:
      with gzip.open(f"{name}.gz", "wb") as f:
        f.write(data)
    else:
      name.write_bytes(data)
  return str(folder)


def _load(folder, split, data_dir):
  return sources.load_split("text", split, path=folder, data_dir=str(data_dir))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
  return _write_corpus(tmp_path_factory.mktemp("lm") / "corpus")


@pytest.fixture(scope="module")
def tok():
  return train_tokenizer(sources.document_lines(
      [{"text": d} for d in DOCS["train"]]), vocab_size=200)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> str:
  return str(tmp_path_factory.mktemp("tfds"))


def _make(corpus, data_dir, tok, **kwargs):
  args = dict(dataset="text", path=corpus, data_dir=data_dir, tokenizer=tok, batch_size=4, max_length=16,
              prefetch=0)
  return lm_pipeline.make_lm_datasets(**{**args, **kwargs})


# --- the "text" dataset ------------------------------------------------------------------------------------------

def test_text_folder_is_split_into_documents_at_blank_lines(tmp_path):
  folder = tmp_path / "corpus"
  folder.mkdir()
  (folder / "train.txt").write_bytes(b"\n \nfirst line\nsecond line\r\n\n\n\t\nthird\n\nfour\n  indented\n\n")
  with gzip.open(folder / "valid.txt.gz", "wb") as f:
    f.write("Grüße\n\n日本語".encode())
  (folder / "test.txt").write_text("only one\n")
  want = {"train": ["first line\nsecond line", "third", "four\n  indented"], "valid": ["Grüße", "日本語"],
          "test": ["only one"]}
  for split, docs in want.items():
    source = _load(str(folder), split, tmp_path / "tfds")
    assert isinstance(source, documents.DocumentSource) and len(source) == len(docs)
    assert [d["text"] for d in source] == docs
    assert source[len(docs) - 1] == {"text": docs[-1]}
  [prepared] = (tmp_path / "tfds" / "text_documents").iterdir()
  assert prepared.name.startswith("corpus-")
  assert any(p.name.startswith("text_documents-train.array_record") for p in (prepared / "1.0.0").iterdir())


def test_corpus_round_trips_and_is_reused(corpus, tmp_path, monkeypatch):
  for split, docs in DOCS.items():
    assert [d["text"] for d in _load(corpus, split, tmp_path / "tfds")] == docs

  def must_not_generate(self, path):
    raise AssertionError("re-prepared an already prepared dataset")

  monkeypatch.setattr(documents.TextDocuments, "_generate_examples", must_not_generate)
  assert len(_load(corpus, "test", tmp_path / "tfds")) == SPLIT_SIZES["test"]


def test_missing_folder_and_files_name_data_path(tmp_path):
  with pytest.raises(ValueError, match=r"text folder '.*nowhere' does not exist; set --config.data.path to a folder "
                                       r"with \{train,valid,test\}.\{txt\} files \(optionally .gz\)"):
    _load(str(tmp_path / "nowhere"), "train", tmp_path / "tfds")
  folder = _write_corpus(tmp_path / "corpus", {"train": ["a"], "valid": ["b"]})
  with pytest.raises(ValueError, match=r"\(data.path\) lacks \['test.txt\[.gz\]'\] \(it holds \['train.txt', "
                                       r"'valid.txt.gz'\]\); every split .* needs a .txt file of documents"):
    _load(folder, "train", tmp_path / "tfds")


def test_empty_split_and_non_utf8_are_named(tmp_path):
  folder = _write_corpus(tmp_path / "corpus", {"train": ["a"], "valid": ["b"], "test": ["c"]}, gzip_splits=())
  (tmp_path / "corpus" / "test.txt").write_text("\n  \n\n")
  with pytest.raises(ValueError, match=r"test.txt holds no document \(it is empty or only blank lines\)"):
    _load(folder, "train", tmp_path / "tfds")
  (tmp_path / "corpus" / "test.txt").write_bytes("ok\n\nGrüße\n".encode("latin-1"))
  with pytest.raises(ValueError, match=r"test.txt line 3 is not UTF-8 text"):
    _load(folder, "train", tmp_path / "tfds")
  assert not (tmp_path / "tfds" / "text_documents").exists() or not any(
      (tmp_path / "tfds" / "text_documents").rglob("*.array_record*"))


def test_check_run_inputs_refuses_bad_text_folders_in_one_line(tmp_path):
  config = config_lib.base_config()
  config.data.dataset = "text"
  run = tmp_path / "run"
  folder = _write_corpus(tmp_path / "corpus", {"train": ["a"], "valid": ["b"], "test": ["c"]}, gzip_splits=())
  checks.check_run_inputs(config, run)  # the bundled corpus ("") is not read here.
  config.data.path = folder
  checks.check_run_inputs(config, run)
  for content, problem in ((b"", "holds no document"), (b"x\n\n\xff\n", "line 3 is not UTF-8")):
    (tmp_path / "corpus" / "valid.txt").write_bytes(content)
    with pytest.raises(ValueError, match=problem) as e:
      checks.check_run_inputs(config, run)
    assert "\n" not in str(e.value)
  (tmp_path / "corpus" / "valid.txt").unlink()
  with pytest.raises(ValueError, match=r"lacks \['valid.txt\[.gz\]'\]"):
    checks.check_run_inputs(config, run)
  config.data.path = str(tmp_path / "missing")
  with pytest.raises(ValueError, match="does not exist; set --config.data.path"):
    checks.check_run_inputs(config, run)
  assert not run.exists()


def test_registry_and_bundled_text_path():
  assert {"text", "lm1b", "wiki40b/*"} <= set(sources.available_datasets())
  assert sources.get_dataset("text") is sources.load_text
  assert sources.get_dataset("wiki40b/de") is sources.get_dataset("lm1b") is sources.load_tfds_text
  assert sources.bundled_text_path() == str(REPO / "jformer" / "data" / "corpora" / "english_text")


# --- DocumentSource, vocabulary, preparation -----------------------------------------------------------------------

def test_document_source_shards_are_disjoint_and_complete(corpus, data_dir):
  source = _load(corpus, "train", data_dir)
  shards = [source.shard(i, 3) for i in range(3)]
  assert [len(s) for s in shards] == [20, 20, 20]
  assert [d["text"] for d in shards[1]] == DOCS["train"][1::3]
  assert shards[2].__getitems__([0, 2]) == [{"text": DOCS["train"][2]}, {"text": DOCS["train"][8]}]
  assert sorted(d["text"] for s in shards for d in s) == sorted(DOCS["train"])
  assert "indices=range(2, 60, 3)" in repr(shards[2]) and "text='text'" in repr(shards[2])
  with pytest.raises(ValueError, match=r"shard_index=3 is not in \[0, shard_count=3\)"):
    source.shard(3, 3)


class _Records(list):
  """A list with the batched read of a tfds data source."""

  def __getitems__(self, keys):
    return [self[k] for k in keys]


def test_training_texts_are_document_lines_or_both_sides_of_pairs():
  docs = documents.DocumentSource(_Records([{"text": b"one\ntwo"}, {"text": "three\n \nfour"}]))
  assert list(sources.training_texts(docs)) == ["one", "two", "three", "four"]
  pairs = sources.TextPairSource(_Records([{"src": b"a", "tgt": "b"}]), inputs_key="src", targets_key="tgt")
  assert list(sources.training_texts(pairs)) == ["a", "b"]


def test_prepare_builds_the_text_dataset_and_a_vocabulary_of_its_lines(corpus, tmp_path, monkeypatch):
  config = config_lib.base_config()
  config.data.dataset, config.data.path, config.model.vocab_size = "text", corpus, 150
  seen = []
  real = workdir.get_tokenizer

  def spy(path, texts_fn, **kwargs):
    seen.extend(texts_fn())
    return real(path, texts_fn, **kwargs)

  monkeypatch.setattr(workdir, "get_tokenizer", spy)
  tok = preparation.prepare(config, str(tmp_path / "run"))
  assert tok.vocab_size == 150 and (tmp_path / "run" / "vocab" / "spm_150.model").is_file()
  assert seen == [line for doc in DOCS["train"] for line in doc.split("\n")]
  assert any((tmp_path / "run" / "tfds" / "text_documents").iterdir())


def test_config_data_pack_is_validated_and_defines_the_run():
  config = config_lib.base_config()
  assert config.data.pack == "documents" and config_lib.is_identity("data.pack")
  config.data.pack = "packed"
  with pytest.raises(ValueError, match="data.pack='packed' is not one of 'documents', 'stream'"):
    config_lib.validate(config)


# --- tfds LM datasets (mocked) -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["lm1b", "wiki40b/en"])
def test_tfds_lm_datasets_load_documents(mock_tfds, tmp_path, tok, name, monkeypatch):
  data_dir = str(tmp_path / "tfds")
  read = []
  data_source = tfds.data_source
  monkeypatch.setattr(sources.tfds, "data_source", lambda n, *, split, data_dir: read.append((n, split)) or
                      data_source(n, split=split, data_dir=data_dir))
  loaded = {split: sources.load_split(name, split, data_dir=data_dir) for split in sources.SPLITS}
  for source in loaded.values():
    assert isinstance(source, documents.DocumentSource) and len(source) == 7
    assert all(isinstance(d["text"], str) and d["text"] for d in source)
  assert read == [(name, "train"), (name, "test" if name == "lm1b" else "validation"), (name, "test")]
  data = lm_pipeline.make_lm_datasets(dataset=name, data_dir=data_dir, tokenizer=tok, batch_size=2, max_length=8,
                                      prefetch=0)
  assert set(next(data.train)) == set(LM_BATCH_KEYS)
  assert data.split_bytes("valid") == sum(len(d["text"].encode()) + 1 for d in loaded["valid"])
  assert not (tmp_path / "tfds").exists()


def test_a_pair_dataset_is_refused_for_language_modelling(tmp_path, tok):
  for split, side in itertools.product(sources.SPLITS, ("src", "tgt")):
    (tmp_path / f"{split}.{side}").write_text("a line\n")
  with pytest.raises(ValueError, match="dataset 'parallel_text' holds translation pairs, not documents"):
    lm_pipeline.make_lm_datasets(dataset="parallel_text", path=str(tmp_path), data_dir=str(tmp_path / "tfds"),
                                 tokenizer=tok, batch_size=2, max_length=8)
  with pytest.raises(ValueError, match="dataset 'text' holds documents, not translation pairs"):
    pipeline.make_datasets(dataset="text", path=_write_corpus(tmp_path / "corpus", {s: ["a"] for s in sources.SPLITS}),
                           data_dir=str(tmp_path / "tfds"), tokenizer=tok, batch_size=2, max_length=8)


# --- packing -------------------------------------------------------------------------------------------------------

def _synthetic(lengths) -> tuple[TokenizedDocuments, np.ndarray, np.ndarray]:
  """Documents whose every token is unique (ids from 3): the documents, and lookup tables token -> document,
  token -> index in its document."""
  tokens, offsets = pipeline.ragged([range(3 + start, 3 + start + n)
                                     for start, n in zip(np.cumsum(lengths) - lengths, lengths)])
  doc_of = np.full(3 + sum(lengths), -1)
  index_in_doc = np.full(3 + sum(lengths), -1)
  for d, n in enumerate(lengths):
    doc_of[tokens[offsets[d]:offsets[d + 1]]] = d
    index_in_doc[tokens[offsets[d]:offsets[d + 1]]] = np.arange(n)
  return TokenizedDocuments(tokens, offsets), doc_of, index_in_doc


LENGTHS = [int(n) for n in np.random.default_rng(1).integers(1, 40, size=50)]  # many longer than one row.


def test_document_packing_keeps_documents_apart_and_every_token_once():
  max_length = 16
  docs, doc_of, index_in_doc = _synthetic(LENGTHS)
  batches = list(lm_train_dataset(docs, batch_size=4, max_length=max_length, pack="documents", num_epochs=1,
                                  drop_remainder=False))
  seen = []
  for batch in batches:
    assert set(batch) == set(LM_BATCH_KEYS) and all(v.dtype == np.int32 for v in batch.values())
    tokens, segments, positions = (batch[k] for k in LM_BATCH_KEYS)
    visible = np.asarray(masks.attention_mask(max_length, max_length, causal=True, q_segment_ids=segments,
                                              kv_segment_ids=segments))[:, 0]  # what the LM's attention sees.
    for row in range(len(tokens)):
      real = segments[row] != 0
      np.testing.assert_array_equal(real, tokens[row] != 0)
      for segment in range(1, segments[row].max() + 1):
        piece = tokens[row][segments[row] == segment]
        np.testing.assert_array_equal(positions[row][segments[row] == segment], np.arange(len(piece)))
        assert len(set(doc_of[piece])) == 1  # one document per segment, ...
        np.testing.assert_array_equal(np.diff(index_in_doc[piece]), 1)  # ... consecutive tokens of it, ...
        assert index_in_doc[piece[0]] % max_length == 0  # ... starting at a cut of max_length.
      query, key = np.nonzero(visible[row])
      assert (doc_of[tokens[row][query]] == doc_of[tokens[row][key]]).all()  # no attention across documents.
      assert (key <= query).all() and set(query) == set(np.nonzero(real)[0])  # each real token sees itself.
      seen.extend(tokens[row][real])
  assert sorted(seen) == list(docs.tokens) and len(seen) == sum(LENGTHS)  # every token exactly once.


def test_stream_rows_are_contiguous_and_cross_documents():
  max_length = 16
  docs, doc_of, index_in_doc = _synthetic(LENGTHS)
  batches = list(lm_train_dataset(docs, batch_size=4, max_length=max_length, pack="stream", num_epochs=1,
                                  drop_remainder=False))
  rows = np.concatenate([b["targets"] for b in batches])
  assert len(rows) == sum(LENGTHS) // max_length
  for batch in batches:
    np.testing.assert_array_equal(batch["targets_segmentation"], 1)
    np.testing.assert_array_equal(batch["targets_position"], np.broadcast_to(np.arange(max_length), (len(
        batch["targets"]), max_length)))
  assert len(np.unique(rows)) == rows.size  # no token twice in an epoch.
  crossings = 0
  for row in rows:
    for a, b in zip(row[:-1], row[1:]):
      if doc_of[a] == doc_of[b]:
        assert index_in_doc[b] == index_in_doc[a] + 1
      else:  # a document ends, the next one starts.
        assert index_in_doc[a] == LENGTHS[doc_of[a]] - 1 and index_in_doc[b] == 0
        crossings += 1
  assert crossings > len(rows) // 2
  # Rows start where the previous row of the epoch's concatenation ended: the documents, in the epoch's order,
  # are the rows laid end to end (less the tail).
  order, starts = lm_pipeline.StreamRows(docs, max_length, seed=0).order(0)
  concatenation = np.concatenate([docs[int(d)]["targets"] for d in order])
  np.testing.assert_array_equal(np.sort(rows.reshape(-1)), np.sort(concatenation[:rows.size]))


def test_stream_epochs_differ_and_pack_names_are_checked():
  docs, _, _ = _synthetic(LENGTHS)
  first = np.concatenate([b["targets"] for b in lm_train_dataset(docs, batch_size=4, max_length=16, pack="stream",
                                                                   num_epochs=2)])
  per_epoch = sum(LENGTHS) // 16 // 4 * 4
  assert not np.array_equal(first[:per_epoch], first[per_epoch:])
  with pytest.raises(ValueError, match=r"data.pack='rows'; use one of \('documents', 'stream'\)"):
    lm_train_dataset(docs, batch_size=4, max_length=16, pack="rows")
  with pytest.raises(ValueError, match="fill no row of max_length=4096"):
    lm_train_dataset(docs, batch_size=4, max_length=4096, pack="stream")


@pytest.mark.parametrize("pack", ["documents", "stream"])
def test_train_iterator_resumes_exactly(corpus, data_dir, tok, pack):
  data = _make(corpus, data_dir, tok, pack=pack, prefetch=2, seed=3)
  for _ in range(5):
    next(data.train)
  state = data.train.get_state()
  want = [next(data.train) for _ in range(4)]
  resumed = _make(corpus, data_dir, tok, pack=pack, prefetch=2, seed=3)
  resumed.train.set_state(state)
  got = [next(resumed.train) for _ in range(4)]
  for w, g in zip(want, got):
    assert set(g) == set(LM_BATCH_KEYS) and all(np.array_equal(w[k], g[k]) for k in LM_BATCH_KEYS)
  assert not np.array_equal(want[0]["targets"], next(_make(corpus, data_dir, tok, pack=pack, seed=4).train)["targets"])


def test_train_rows_hold_the_tokenized_documents(corpus, data_dir, tok):
  data = _make(corpus, data_dir, tok, max_length=32, batch_size=8)
  batch = next(data.train)
  want = {tuple(tok.encode(doc)) for doc in DOCS["train"]}
  tokens, segments = batch["targets"], batch["targets_segmentation"]
  pieces = [tuple(tokens[r][segments[r] == s]) for r in range(8) for s in range(1, segments[r].max() + 1)]
  assert pieces and all(any(p == doc[i:i + 32] for doc in want for i in range(0, len(doc), 32)) for p in pieces)
  assert data.describe(32).startswith(f"data: 60 training documents ({data.train_documents.num_tokens():,} tokens "
                                      "with EOS), pack='documents': ")


# --- eval, bytes, hosts --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("max_length", [8, 32])
def test_eval_batches_hold_every_token_once(corpus, data_dir, tok, max_length):
  data = _make(corpus, data_dir, tok, eval_batch_size=3)
  want = [ids[i:i + max_length] for doc in DOCS["valid"] for ids in [tok.encode(doc)]
          for i in range(0, len(ids), max_length)]
  batches = list(data.eval_batches("valid", max_length=max_length))
  assert len(batches) == -(-len(want) // 3)
  rows = []
  for batch in batches:
    assert set(batch) == set(LM_BATCH_KEYS) and batch["targets"].shape == (3, max_length)
    for tokens, segments, positions in zip(*(batch[k] for k in LM_BATCH_KEYS)):
      n = int((segments != 0).sum())
      np.testing.assert_array_equal(segments[:n], 1)
      np.testing.assert_array_equal(positions[:n], np.arange(n))
      assert not segments[n:].any() and not tokens[n:].any()
      if n:
        rows.append(list(tokens[:n]))
  assert rows == want
  assert sum(map(len, rows)) == sum(len(tok.encode(doc)) for doc in DOCS["valid"])
  assert [r[-1] for r in rows].count(1) == len(DOCS["valid"])  # one EOS per document.


def test_split_bytes_against_a_hand_count(tmp_path, tok):
  folder = _write_corpus(tmp_path / "corpus", {"train": ["some text"], "valid": [
      "Grüße aus Köln", "naïve café\nsecond line", "日本語"], "test": ["x"]})
  data = _make(folder, str(tmp_path / "tfds"), tok)
  # bytes: 14 characters, 3 of them 2 bytes -> 17; 5 + 1 + 4 + 1 + 11 characters, 2 of them 2 bytes -> 24;
  # 3 characters of 3 bytes -> 9; plus one end per document.
  assert data.split_bytes("valid") == 17 + 24 + 9 + 3
  assert data.split_bytes("test") == 2
  assert data.documents("valid") == ["Grüße aus Köln", "naïve café\nsecond line", "日本語"]
  assert data.split_sizes == {"train": 1, "valid": 3, "test": 1}


def test_hosts_shard_before_tokenizing_and_get_the_same_number_of_eval_batches(corpus, data_dir, tok, monkeypatch):
  encoded = []
  monkeypatch.setattr(type(tok), "encode_batch", lambda self, texts: encoded.extend(texts) or [
      self.encode(t) for t in texts])
  hosts = [_make(corpus, data_dir, tok, shard_index=i, shard_count=2, eval_batch_size=2) for i in range(2)]
  assert sorted(encoded) == sorted(DOCS["train"])  # each document tokenized once, by its host.
  whole = _make(corpus, data_dir, tok)
  assert [len(h.train_documents) for h in hosts] == [30, 30]
  assert sum(h.train_documents.num_tokens() for h in hosts) == whole.train_documents.num_tokens()
  np.testing.assert_array_equal(hosts[1].train_documents[0]["targets"], whole.train_documents[1]["targets"])
  counts = [len(lm_pipeline.tokenize_documents(_load(corpus, "valid", data_dir).shard(i, 2), tok).pieces(8))
            for i in range(2)]
  assert counts[0] != counts[1]
  monkeypatch.setattr(lm_pipeline.jax, "process_count", lambda: 2)
  monkeypatch.setattr(multihost_utils, "process_allgather", lambda count: np.array(counts))
  batches = [list(h.eval_batches("valid", max_length=8)) for h in hosts]
  assert len(batches[0]) == len(batches[1]) == -(-max(counts) // 2)
  tokens = sum(int((b["targets_segmentation"] != 0).sum()) for host in batches for b in host)
  assert tokens == sum(len(tok.encode(doc)) for doc in DOCS["valid"])
  assert hosts[0].split_bytes("valid") == hosts[1].split_bytes("valid") == whole.split_bytes("valid")
  assert "host 1 of 2 (60 documents in the split)" in hosts[1].describe(16)


def test_eval_of_simulated_hosts_without_their_processes_is_refused(corpus, data_dir, tok):
  data = _make(corpus, data_dir, tok, shard_index=0, shard_count=2)
  with pytest.raises(ValueError, match="eval batches of shard_count=2 hosts need one process per host"):
    data.eval_batches("valid")


def test_jformer_train_refuses_a_bad_text_folder_in_one_line_and_writes_nothing(tmp_path):
  from jformer import main

  folder = _write_corpus(tmp_path / "corpus", {"train": ["a"], "valid": ["b"], "test": ["c"]}, gzip_splits=())
  (tmp_path / "corpus" / "train.txt").write_bytes(b"fine\n\nGr\xfc\xdfe\n")
  with pytest.raises(SystemExit) as exit_info:
    main.main(["train", f"--config={REPO / 'configs' / 'small.py'}", f"--workdir={tmp_path / 'run'}",
               "--config.data.dataset=text", f"--config.data.path={folder}"])
  assert exit_info.value.code == (f"jformer train: error: {tmp_path / 'corpus' / 'train.txt'} line 3 is not UTF-8 "
                                  "text (invalid start byte); convert the file to UTF-8 (e.g. `iconv -f latin1 -t "
                                  "utf-8`).")
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("pack", ["documents", "stream"])
def test_the_language_model_sees_no_other_document_in_a_packed_row(tok, pack):
  """Changing every token outside one segment of a row leaves the LM's logits on that segment unchanged with
  packed documents; in a stream row the same change reaches the later tokens (attention across documents)."""
  import jax

  from jformer import tasks

  config = config_lib.load(REPO / "configs" / "small.py", {
      "model.architecture": "lm", "model.vocab_size": 200, "model.d_model": 32, "model.num_heads": 2,
      "model.d_ff": 64, "model.num_decoder_layers": 2, "model.max_length": 32, "data.max_length": 32})
  model = tasks.build_model(config)
  short = lm_pipeline.tokenize_documents([{"text": doc.split("\n")[0][:40]} for doc in DOCS["train"]], tok)
  batch = next(iter(lm_train_dataset(short, batch_size=4, max_length=32, pack=pack)))
  row = int(np.argmax(batch["targets_segmentation"].max(axis=1)))  # the row with most segments.
  segment = batch["targets_segmentation"][row] == (2 if pack == "documents" else 1)
  if pack == "stream":
    segment[:16] = False  # the second half of the row, after the changed tokens.
  changed = {k: v.copy() for k, v in batch.items()}
  changed["targets"][row][~segment] = np.where(batch["targets"][row][~segment] == 5, 6, 5)
  args, kwargs = model.call_arguments(batch)
  params = model.init(jax.random.PRNGKey(0), *args, **kwargs)
  logits, changed_logits = (np.asarray(model.apply(params, *a, **k)[row][segment]) for a, k in (
      model.call_arguments(batch), model.call_arguments(changed)))
  if pack == "documents":
    assert segment.sum() > 1
    np.testing.assert_allclose(changed_logits, logits, atol=1e-5)
  else:
    assert np.abs(changed_logits - logits).max() > 1e-3
