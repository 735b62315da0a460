"""The adaptive recipe's former home: it moved to `jformer.config.adaptive` (it maps a config to a config); these
names stay so that code written against `jformer.train.recipe` keeps working."""

from jformer.config.adaptive import (BUDGET_TRAINING_FRACTION, BYTES_PER_TOKEN, STEP_EFFICIENCY, Inputs,  # noqa: F401
                                     adapt, choose, describe, estimate_step_seconds, probe_rate, step_seconds)
