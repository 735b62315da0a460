"""The task registry: `model.architecture` -> what a run trains (its model) and how it is evaluated (its task).

    @register("transformer", model=Transformer, pairs=True)
    class TranslationTask: ...

A task class has `build(config, workdir, tokenizer)` (its datasets, this host's share) and the methods the train
loop and `jformer evaluate` call (`jformer/tasks/__init__.py`). `build_model` is the one place a model is built.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn

from jformer.models import TransformerConfig
from jformer.registry import Registry, caller, first_line


@dataclasses.dataclass(frozen=True)
class TaskEntry:
  """A registered task.

  Attributes:
    name: the config string (`model.architecture`).
    model: the Flax module class it trains, built from a `TransformerConfig` (and `mesh=`).
    task: the task class (`build(config, workdir, tokenizer)`).
    pairs: it trains on (source, target) pairs (so `data.batch_tokens` applies), not on single sequences.
    doc: one line for `jformer list task`.
  """
  name: str
  model: type
  task: type
  pairs: bool
  doc: str


def _declare(name: str, task: type, *, model: type, pairs: bool, doc: str = "") -> TaskEntry:
  if not (isinstance(model, type) and issubclass(model, nn.Module)):
    raise ValueError(f"task '{name}': model= must be a Flax module class, got {model!r}")
  if not hasattr(task, "build"):
    raise ValueError(f"task '{name}': its class needs a `build(config, workdir, tokenizer)` classmethod")
  return TaskEntry(name, model, task, pairs, doc or first_line(task.__doc__))


REGISTRY: Registry[TaskEntry] = Registry("task", declare=_declare)


def register(name: str, *, model: type, pairs: bool, doc: str = ""):
  """Decorator: `@register("name", model=ModuleClass, pairs=...)` above a task class."""
  return REGISTRY.register(name, origin=caller(), model=model, pairs=pairs, doc=doc)


def get(name: str) -> TaskEntry:
  """The task registered as `name`; an unknown name raises a KeyError listing the known ones."""
  return REGISTRY.get(name)


def available() -> list[str]:
  return REGISTRY.available()


def build_model(config, *, mesh=None) -> nn.Module:
  """The module `config.model` describes (`model.architecture`'s model), its frozen config resolved once per
  process (`TransformerConfig.from_config`); `mesh`: the `jformer.axes.Placement` its kernels run per device
  on, None on one device or under pmap."""
  model_config = TransformerConfig.from_config(config.model)
  return get(model_config.architecture).model(model_config, mesh=mesh)


def make_task(config, workdir, tokenizer):
  """The task of `config.model.architecture`, with its datasets built for this host."""
  return get(config.model.architecture).task.build(config, workdir, tokenizer)
