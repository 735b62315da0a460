"""Resolve once: a `jformer train` process validates its config once, resolves the registry names of
`model.attention` and `model.positional` at validation (the name's check and its resolution) and never again once the
model is built (not while tracing), and builds the model once, on a fresh workdir and on resume
(docs/ARCHITECTURE.md traces the path)."""

import collections

import pytest

from helpers import SMALL, tiny_overrides
from jformer import config as config_lib
from jformer import main, registry, tasks


@pytest.fixture
def counted(monkeypatch):
  """Counts of config validations and model builds, and of registry lookups per (phase, kind): phase 'before' the
  first model build returned, 'after' it."""
  counts = collections.Counter()
  lookups = collections.Counter()

  def counting(name, function):
    def wrapper(*args, **kwargs):
      result = function(*args, **kwargs)
      counts[name] += 1
      return result
    return wrapper

  monkeypatch.setattr(config_lib, "validate", counting("validate", config_lib.validate))
  monkeypatch.setattr(tasks, "build_model", counting("build_model", tasks.build_model))
  original_get = registry.Registry.get

  def get(self, name):
    lookups["after" if counts["build_model"] else "before", self.kind] += 1
    return original_get(self, name)

  monkeypatch.setattr(registry.Registry, "get", get)
  return counts, lookups


@pytest.mark.integration
@pytest.mark.parametrize("attention", ["dot_product", "auto"])
def test_a_run_validates_once_resolves_names_once_and_builds_its_model_once(counted, tiny_corpus, tmp_path, capsys,
                                                                            attention):
  counts, lookups = counted
  # d_ff=40 and model.attention: field values no other test uses, so that nothing was resolved before this test.
  overrides = tiny_overrides(tiny_corpus, **{"model.d_ff": 40, "model.attention": attention, "train.steps": 3,
                                             "train.bleu_examples": 2, "train.average_checkpoints": 0})

  def train(**extra):
    counts.clear()
    lookups.clear()
    main.main(["train", f"--config={SMALL}", f"--workdir={tmp_path / 'run'}",
               *(f"--config.{k}={v}" for k, v in {**overrides, **extra}.items())])
    return dict(counts), dict(lookups)

  for extra in ({}, {"train.steps": 6}):  # a fresh run, then its resume.
    counts_, lookups_ = train(**extra)
    assert counts_ == {"validate": 1, "build_model": 1}, counts_
    for kind in ("attention variant", "positional encoding"):
      assert 1 <= lookups_.get(("before", kind), 0) <= 2, lookups_  # the name's check and its resolution.
      assert ("after", kind) not in lookups_, lookups_  # nothing per trace, per layer or inside `auto`.
  assert "resumed from step 3" in capsys.readouterr().out
