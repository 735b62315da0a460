"""The dataset registry, the parallel_text tfds builder (ArrayRecord, no TensorFlow) and tfds WMT sources."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from jformer.data import parallel_text, sources

PAIRS = {
    "train": [("hello world", "hallo Welt"), ("open file", "Datei öffnen"), ("%s not found", "%s nicht gefunden")],
    "valid": [("save", "speichern"), ("close the window", "das Fenster schließen")],
    "test": [("quit", "beenden")],
}


def _write_folder(folder, pairs=PAIRS, gzip_sides=("tgt",)) -> str:
  """Writes `<split>.src` / `<split>.tgt` (gzipped for `gzip_sides`) and returns the folder."""
  os.makedirs(folder, exist_ok=True)
  for split, split_pairs in pairs.items():
    for side, lines in zip(parallel_text.SIDES, zip(*split_pairs)):
      data = "".join(f"{line}\n" for line in lines).encode()
      name = os.path.join(folder, f"{split}.{side}")
      with (gzip.open(name + ".gz", "wb") if side in gzip_sides else open(name, "wb")) as f:
        f.write(data)
  return str(folder)


def _load(folder, split, data_dir):
  return sources.load_split("parallel_text", split, path=folder, data_dir=str(data_dir))


def test_tensorflow_is_not_installed():
  with pytest.raises(ImportError):
    import tensorflow  # noqa: F401


def test_parallel_text_reads_pairs_in_file_order(tmp_path):
  folder = _write_folder(tmp_path / "corpus")
  for split, pairs in PAIRS.items():
    source = _load(folder, split, tmp_path / "tfds")
    assert len(source) == len(pairs)
    assert [(p["inputs"], p["targets"]) for p in source] == pairs
    assert source[len(pairs) - 1] == {"inputs": pairs[-1][0], "targets": pairs[-1][1]}
  [prepared] = (tmp_path / "tfds" / "parallel_text").iterdir()
  assert prepared.name.startswith("corpus-")
  assert any(p.name.startswith("parallel_text-train.array_record") for p in (prepared / "1.0.0").iterdir())


def test_prepared_dataset_is_reused(tmp_path, monkeypatch):
  folder = _write_folder(tmp_path / "corpus")
  _load(folder, "train", tmp_path / "tfds")

  def must_not_generate(self, src, tgt):
    raise AssertionError("re-prepared an already prepared dataset")

  monkeypatch.setattr(parallel_text.ParallelText, "_generate_examples", must_not_generate)
  assert len(_load(folder, "valid", tmp_path / "tfds")) == 2


def test_changed_folder_is_not_served_stale(tmp_path):
  folder = _write_folder(tmp_path / "corpus")
  assert _load(folder, "test", tmp_path / "tfds")[0]["inputs"] == "quit"
  changed = dict(PAIRS, test=[("exit now", "jetzt beenden"), ("stop", "anhalten")])
  _write_folder(folder, changed)
  source = _load(folder, "test", tmp_path / "tfds")
  assert [(p["inputs"], p["targets"]) for p in source] == changed["test"]
  assert len(list((tmp_path / "tfds" / "parallel_text").iterdir())) == 2


def test_misaligned_files_name_files_and_counts(tmp_path):
  folder = _write_folder(tmp_path / "corpus", dict(PAIRS, valid=[("a", "b"), ("c", "d")]))
  with open(os.path.join(folder, "valid.src"), "a") as f:
    f.write("one line too many\n")
  with pytest.raises(ValueError, match="misaligned") as e:
    _load(folder, "train", tmp_path / "tfds")
  assert "valid.src has 3 lines" in str(e.value) and "valid.tgt.gz has 2" in str(e.value)


def test_empty_file_is_named(tmp_path):
  folder = _write_folder(tmp_path / "corpus")
  open(os.path.join(folder, "test.src"), "w").close()
  with pytest.raises(ValueError, match=r"empty file\(s\) \['.*test\.src'\] in split 'test'"):
    _load(folder, "train", tmp_path / "tfds")


def test_missing_split_is_named(tmp_path):
  folder = _write_folder(tmp_path / "corpus", {k: PAIRS[k] for k in ("train", "valid")})
  with pytest.raises(ValueError, match=r"lacks \['test.src\[.gz\]', 'test.tgt\[.gz\]'\]"):
    _load(folder, "train", tmp_path / "tfds")


def test_plain_and_gzipped_copy_of_one_file_is_ambiguous(tmp_path):
  folder = _write_folder(tmp_path / "corpus")
  _write_folder(folder, gzip_sides=("src", "tgt"))
  with pytest.raises(ValueError, match="train.src and .*train.src.gz exist"):
    _load(folder, "train", tmp_path / "tfds")


def test_missing_folder_is_named(tmp_path):
  with pytest.raises(ValueError, match="nowhere.*does not exist"):
    _load(str(tmp_path / "nowhere"), "train", tmp_path / "tfds")


def test_registry():
  assert {"parallel_text", "wmt*_translate/*"} <= set(sources.available_datasets())
  assert sources.get_dataset("parallel_text") is sources.load_parallel_text
  assert sources.get_dataset("wmt17_translate/de-en") is sources.load_tfds_translate
  with pytest.raises(KeyError, match=r"unknown dataset 'wmt14'; known: \[.*'parallel_text'"):
    sources.get_dataset("wmt14")
  with pytest.raises(ValueError, match="registered twice"):
    sources.register_dataset("parallel_text")(lambda *a, **k: None)
  with pytest.raises(ValueError, match=r"unknown split 'validation'; splits are \('train', 'valid', 'test'\)"):
    sources.load_split("parallel_text", "validation")


@pytest.mark.parametrize("name", ["wmt14_translate/de-en", "wmt17_translate/de-en"])
def test_wmt_source_maps_languages_and_splits(mock_tfds, tmp_path, name):
  data_dir = str(tmp_path / "tfds")
  for split in sources.SPLITS:
    en_de = sources.load_split(name, split, data_dir=data_dir)
    de_en = sources.load_split(name, split, data_dir=data_dir, source_lang="de", target_lang="en")
    assert len(en_de) == 7
    pairs = list(en_de)
    assert all(isinstance(p["inputs"], str) and isinstance(p["targets"], str) for p in pairs)
    assert [{"inputs": p["targets"], "targets": p["inputs"]} for p in pairs] == list(de_en)
  assert not os.path.exists(data_dir)


def test_wmt_unknown_language_lists_the_languages(mock_tfds, tmp_path):
  with pytest.raises(ValueError, match=r"no language 'fr'; its languages are \['de', 'en'\]"):
    sources.load_split("wmt14_translate/de-en", "train", data_dir=str(tmp_path), target_lang="fr")


def test_bundled_corpus_matches_its_stats():
  folder = sources.bundled_corpus_path()
  with open(os.path.join(folder, "stats.json")) as f:
    stats = json.load(f)
  sizes = parallel_text.check_aligned(parallel_text.find_split_files(folder))
  assert sizes == {split: stats[split]["pairs"] for split in parallel_text.SPLITS}
  assert os.path.exists(os.path.join(folder, "README.md"))
