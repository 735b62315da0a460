"""benchmarks/flax_wmt_example.py: the Flax WMT example's files come from flax's source release (extracted once,
refused with a clear error when missing), and its decoding runs on a small shape where the release is at hand
(skipped elsewhere: fetching it needs PyPI, which tests never reach)."""

import io
import tarfile

import numpy as np
import pytest
from helpers import import_benchmark

flax_wmt_example = import_benchmark("flax_wmt_example")


def fake_release(path, version, files):
  with tarfile.open(path, "w:gz") as archive:
    for name, text in files.items():
      data = text.encode()
      info = tarfile.TarInfo(f"flax-{version}/examples/wmt/{name}")
      info.size = len(data)
      archive.addfile(info, io.BytesIO(data))
  return str(path)


def test_the_examples_files_are_read_from_the_source_release(tmp_path, monkeypatch):
  import flax

  monkeypatch.setattr(flax_wmt_example, "CACHE", tmp_path / "cache")
  files = {"models.py": "WHAT = 'models'\n", "decode.py": "WHAT = 'decode'\n", "train.py": "import tensorflow\n"}
  sdist = fake_release(tmp_path / "flax.tar.gz", flax.__version__, files)
  models, decode = flax_wmt_example.load(sdist)
  assert (models.WHAT, decode.WHAT) == ("models", "decode")
  folder = tmp_path / "cache" / f"flax-{flax.__version__}" / "wmt"
  assert sorted(p.name for p in folder.iterdir()) == ["decode.py", "models.py"]  # only what the peer runs.
  assert flax_wmt_example.example_dir() == folder  # extracted once: no second download.


def test_a_release_without_the_example_is_refused_naming_the_file(tmp_path, monkeypatch):
  import flax

  monkeypatch.setattr(flax_wmt_example, "CACHE", tmp_path / "cache")
  sdist = fake_release(tmp_path / "flax.tar.gz", flax.__version__, {"models.py": "\n"})
  with pytest.raises(RuntimeError, match="has no flax-.*/examples/wmt/decode.py"):
    flax_wmt_example.load(sdist)


def test_the_example_decodes_a_small_shape_with_eos_blocked():
  import flax
  import jax

  common = import_benchmark("common")
  folder = flax_wmt_example.CACHE / f"flax-{flax.__version__}" / "wmt"
  if not (folder / "decode.py").exists():
    pytest.skip(f"the Flax WMT example is not extracted in {folder} (benchmarks/decode.py --flax-example does it)")
  toy = common.Shape("TOY", vocab=64, d_model=32, heads=2, d_ff=64, layers=1, batch=2, source_length=8,
                     target_length=8)
  inputs = jax.numpy.asarray(np.random.default_rng(0).integers(1, 64, (2, 8), dtype=np.int32))
  for beams in (3, 1):
    run, params = flax_wmt_example.decode_function(flax_wmt_example.load(), toy, "float32", inputs, steps=5,
                                                   beam_size=beams, alpha=0.6, eos_id=2)
    ids = np.asarray(jax.jit(run)(params, inputs))
    assert ids.shape == (2, 5) and (ids != 2).all()
