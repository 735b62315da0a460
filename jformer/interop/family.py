"""What jformer knows of a family of pretrained models: how its config.json becomes jformer's model section, which
of its token ids start and end a sequence, and its mapping table (`jformer.interop.tables`). The families register
here (`REGISTRY`) by the architecture names their config.json lists ("LlamaForCausalLM", ...)."""

from __future__ import annotations

import dataclasses
from typing import Callable

from jformer.data.pretrained_vocab import VocabularyMap
from jformer.interop.tables import Row
from jformer.registry import Registry, caller


@dataclasses.dataclass(frozen=True)
class Family:
  """A family of pretrained models.

  Attributes:
    name: what the family is called in messages ("llama").
    architectures: the config.json `architectures` names it reads.
    model_fields: pretrained config -> {jformer model field: value} (all but `vocab_size`); ValueError naming an
      option of the pretrained config jformer has no block for.
    special_ids: pretrained config -> (start id, end id) (`VocabularyMap`).
    rows: (pretrained config, vocabulary map) -> the mapping table.
    num_layers: pretrained config -> the layer count the table's "{i}" rows expand over.
    ignored: pretrained config -> regular expressions of tensor names skipped on import: buffers the model
      recomputes, a tied output embedding saved twice.
    doc: one line for `jformer list pretrained`.
    fine_tuning: config values an imported run starts from besides `jformer.interop.hf.FINE_TUNING` (a translation
      model's data are pairs).
  """
  name: str
  architectures: tuple[str, ...]
  model_fields: Callable[[dict], dict]
  special_ids: Callable[[dict], tuple[int, int]]
  rows: Callable[[dict, VocabularyMap], list[Row]]
  num_layers: Callable[[dict], int]
  ignored: Callable[[dict], tuple[str, ...]] = lambda hf: ()
  doc: str = ""
  fine_tuning: dict = dataclasses.field(default_factory=dict)


# Architecture name (config.json's `architectures`) -> the family that reads it; `jformer list pretrained` shows it.
REGISTRY: Registry[Family] = Registry("pretrained architecture", details=lambda family: f"family: {family.name}")


def register(family: Family) -> Family:
  """Makes `family` the reader of each of its architecture names (a name read twice is refused)."""
  for architecture in family.architectures:
    REGISTRY.add(architecture, family, origin=caller())
  return family


def family_of(pretrained_config: dict) -> Family:
  """The family that reads this config.json (by its `architectures`); ValueError naming the known ones."""
  names = pretrained_config.get("architectures") or []
  for name in names:
    if name in REGISTRY:
      return REGISTRY.get(name)
  raise ValueError(f"config.json lists architectures {names}; jformer imports {REGISTRY.available()}")


def token_id(value) -> int | None:
  """A config's token id (the first when it lists several, as Llama 3's eos_token_id)."""
  if isinstance(value, (list, tuple)):
    return int(value[0]) if value else None
  return None if value is None else int(value)


def refuse(family: str, problem: str) -> None:
  raise ValueError(f"{family} config: {problem}")
