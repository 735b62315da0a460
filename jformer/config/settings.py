"""A run's settings: what training reads of a validated config, as frozen dataclasses with typed fields.

`jformer.train` receives these instead of the config. Every field is declared and documented once: the sections in
`jformer.config.schema`, the model in `jformer.models.TransformerConfig` (the frozen config validation built).
"""

from __future__ import annotations

import dataclasses

import ml_collections

from jformer.config.schema import DataSection, OptimizerSection, ParallelSection, TrainSection
from jformer.models.config import TransformerConfig


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """The sections of a run's config that training, evaluation, the time budget and the runners read."""
  model: TransformerConfig
  data: DataSection
  optimizer: OptimizerSection
  train: TrainSection
  parallel: ParallelSection
  config: ml_collections.ConfigDict  # the validated config itself, only for the layers that take one (data.prepare,
  # tasks.make_task, tasks.build_model, config.write_run, the run's identity); training reads the fields above.


def run_settings(config: ml_collections.ConfigDict | RunSettings) -> RunSettings:
  """The settings of `config`, validated already (`load`, `checked`: a run validates its config once). Its model is
  the frozen config validation built (`TransformerConfig.from_config` returns the same one). Settings are returned
  as they are, so a public function that took the config before (`train.runner.make_runner`) takes either."""
  if isinstance(config, RunSettings):
    return config
  return RunSettings(TransformerConfig.from_config(config.model), *(
      section(**{f.name: _frozen(config[name][f.name]) for f in dataclasses.fields(section)})
      for name, section in (("data", DataSection), ("optimizer", OptimizerSection), ("train", TrainSection),
                            ("parallel", ParallelSection))), config)


def _frozen(value):
  """`value` with lists as tuples and option groups (ConfigDicts) as tuples of (option, value)."""
  if isinstance(value, (ml_collections.ConfigDict, dict)):
    return tuple((key, _frozen(item)) for key, item in value.items())
  return tuple(map(_frozen, value)) if isinstance(value, list) else value
