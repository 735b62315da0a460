"""Test setup: 8 fake CPU devices (set before jax is imported anywhere) and shared helpers."""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pathlib  # noqa: E402

from jformer import runtime  # noqa: E402

runtime.configure_host_allocator()  # faster XLA:CPU steps: no page faults on every call (jformer/runtime.py).

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]


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


def tiny_overrides(corpus: pathlib.Path, **extra) -> dict:
  """Config overrides for a model that trains in seconds on `tiny_corpus`."""
  overrides = {
      "data.path": str(corpus), "data.max_length": 32, "data.batch_size": 8, "data.eval_batch_size": 8,
      "model.vocab_size": 300, "model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64,
      "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, "model.max_length": 64,
      "optimizer.warmup_steps": 10, "train.steps": 6, "train.log_every": 2, "train.eval_every": 3,
      "train.checkpoint_every": 3, "decode.method": "greedy", "decode.max_extra_length": 5,
  }
  overrides.update(extra)
  return overrides


def positional_overrides(name: str) -> dict:
  """Config overrides selecting positional encoding `name` with its `example_options` (for small test models)."""
  from jformer import positional

  return {"model.positional": name, **{f"model.positional_options.{option}": value
                                       for option, value in positional.get(name).example_options.items()}}
