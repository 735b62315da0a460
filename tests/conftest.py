"""Test setup: 8 fake CPU devices (set before jax is imported anywhere) and the shared fixtures (the shared helper
functions: tests/helpers.py)."""

import os

import xla_flags  # no imports of its own: jax is not imported before XLA_FLAGS is set.

# 8 fake devices and the flags that compile faster (tests/xla_flags.py), for this process and every process it starts.
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {xla_flags.with_devices(8)}".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# One persistent compilation cache (jformer/runtime.py) for the whole test run, never the user's: the folder
# JFORMER_TEST_COMPILATION_CACHE names (.ci/run: one for both tiers; 'off': no cache), else a temporary folder made
# by the first process that imports this file (pytest's, before it starts its xdist workers, which inherit the
# variable) and removed when that process exits. The xdist workers and the commands tests start (`jformer train`
# reads JFORMER_COMPILATION_CACHE) then load a program another process compiled instead of compiling it again.
# The cache's key is the program, the jax/XLA versions, the devices, the compile options and XLA_FLAGS (one value for
# every process of the run); tests/test_runtime.py and tests/test_cli.py test the cache itself in folders of their own.
TEST_CACHE_ENV = "JFORMER_TEST_COMPILATION_CACHE"
if not os.environ.get(TEST_CACHE_ENV):
  import atexit
  import shutil
  import tempfile

  os.environ[TEST_CACHE_ENV] = tempfile.mkdtemp(prefix="jformer-test-xla-")
  atexit.register(shutil.rmtree, os.environ[TEST_CACHE_ENV], ignore_errors=True)
os.environ["JFORMER_COMPILATION_CACHE"] = "" if os.environ[TEST_CACHE_ENV] == "off" else os.environ[TEST_CACHE_ENV]
IN_PROCESS_CACHE_MIN_COMPILE_SECONDS = 0.2  # below the commands' (runtime.CACHE_MIN_COMPILE_SECONDS): small programs.

import pathlib  # noqa: E402

from jformer import runtime  # noqa: E402

runtime.configure_host_allocator()  # faster XLA:CPU steps: no page faults on every call (jformer/runtime.py).
runtime.configure_compilation_cache(min_compile_seconds=IN_PROCESS_CACHE_MIN_COMPILE_SECONDS)  # before compiling.

import pytest  # noqa: E402

from helpers import FLEX_PLUGINS, PLUGIN, REPO  # noqa: E402
from module_order import (pytest_collection_modifyitems, pytest_runtest_logreport,  # noqa: E402, F401 (hooks)
                          pytest_sessionfinish)


@pytest.fixture
def scratch_registries():
  """Plug-ins of every kind registered during a test are dropped after it (`Registry.temporary`)."""
  import contextlib

  from jformer import config, registry  # noqa: F401 (config imports every plug-in package)

  with contextlib.ExitStack() as stack:
    for kind in registry.kinds().values():
      stack.enter_context(kind.temporary())
    yield


@pytest.fixture
def mock_tfds(monkeypatch):
  """`tfds.testing.mock_data` with 7 random examples per split; nothing is downloaded or read from disk."""
  import tensorflow_datasets as tfds
  from tensorflow_datasets.testing import mocking

  # tfds 4.9.10's mock binds `__getitems__` without `self`; ours takes the record keys and the generator only.
  monkeypatch.setattr(mocking, "_getitems", lambda record_keys, generator, serialized=False:
                      [generator[k] for k in record_keys])
  with tfds.testing.mock_data(num_examples=7):
    yield


@pytest.fixture
def repo_root() -> pathlib.Path:
  return REPO


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> pathlib.Path:
  """A small aligned folder cut from the bundled corpus: 400 train, 24 valid, 24 test pairs."""
  import gzip

  bundled = REPO / "jformer" / "data" / "corpora" / "gettext_en_de"
  folder = tmp_path_factory.mktemp("tiny_corpus")
  for split, count in (("train", 400), ("valid", 24), ("test", 24)):
    for side in ("src", "tgt"):
      with gzip.open(bundled / f"{split}.{side}.gz", "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(count)]
      (folder / f"{split}.{side}").write_text("".join(lines), encoding="utf-8")
  return folder


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory) -> pathlib.Path:
  """{train,valid,test}.txt: documents of 1 to 4 lines of the bundled corpus's English side, blank-line separated."""
  import gzip
  import itertools

  import numpy as np

  folder = tmp_path_factory.mktemp("text_corpus") / "corpus"
  folder.mkdir()
  with gzip.open(REPO / "jformer" / "data" / "corpora" / "gettext_en_de" / "train.src.gz", "rt",
                 encoding="utf-8") as f:
    lines = (line.rstrip("\n") for line in f if line.strip())
    rng = np.random.default_rng(0)
    for split, count in (("train", 150), ("valid", 8), ("test", 8)):
      documents = ["\n".join(itertools.islice(lines, int(rng.integers(1, 5)))) for _ in range(count)]
      (folder / f"{split}.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
  return folder


@pytest.fixture
def plugin_registry(scratch_registries):
  """The registries with the plug-in of tests/plugins/ loaded, dropped after the test (other tests see the
  built-ins)."""
  from jformer import config as config_lib

  config_lib.import_plugins(str(PLUGIN))


@pytest.fixture
def flex_plugins(scratch_registries):
  """The registries with the flex plug-ins of tests/plugins/ loaded (`helpers.FLEX_PLUGINS`), dropped after the
  test."""
  from jformer import config as config_lib

  config_lib.import_plugins(", ".join(str(path) for path in FLEX_PLUGINS))
