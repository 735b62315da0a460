"""Config files of the synthetic tasks (configs/mqar.py, induction.py, selective_copy.py): the task and what it
fixes of the rest of the config, set in one call."""

from __future__ import annotations

import ml_collections

from jformer.data import synthetic


def use_synthetic_task(config: ml_collections.ConfigDict, dataset: str, **options) -> None:
  """Sets data.dataset and data.dataset_options, and from the task's sizes (`jformer.data.synthetic.sizes`) the
  model's vocabulary (the reserved ids and the task's tokens) and both maximum lengths (the task's seq_len)."""
  sizes = synthetic.sizes(dataset, **options)
  config.data.dataset = dataset
  config.data.dataset_options = dict(options)
  config.model.vocab_size = sizes.vocab_size
  config.data.max_length = config.model.max_length = sizes.seq_len
