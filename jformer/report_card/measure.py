"""The report card's measurements: a train step's time and temporary memory, a decode step's time and state, for a
config's model with random weights and random tokens (`jformer.report_card.suite` says which config and sizes).

Both use the training and decoding code itself: the train loop's runner (`make_runner`: the same jit, mesh and
donation as `jformer train`) and the generator's cached call (`jformer.decode.generator.feed`)."""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from jformer import config as config_lib
from jformer import tasks
from jformer.decode import generator
from jformer.ops.tokens import UNK_ID
from jformer.train import optim
from jformer.train.runner import make_runner

MIB = 2**20


def _timed_ms(step, reps: int) -> dict:
  """`ms`: the median wall milliseconds of `step()` (which blocks until its result is ready) over `reps` calls;
  `ms_runs`: each call's (the card's range for this figure)."""
  times = []
  for _ in range(reps):
    start = time.perf_counter()
    step()
    times.append(1e3 * (time.perf_counter() - start))
  return {"ms": statistics.median(times), "ms_runs": times}


def train_step(config, reps: int) -> dict:
  """Median ms of the train step on one batch of random tokens (`config.data.batch_size` x `data.max_length`)
  after one untimed step (which compiles), and the compiled step's temporary memory per device (`temp_mib`, None
  where the backend does not report it)."""
  model = tasks.build_model(config)
  tx, schedule = optim.build_optimizer(config.optimizer, config.model.d_model, config.train.steps)
  shape = (config.data.batch_size, config.data.max_length)
  tokens = np.random.default_rng(0).integers(UNK_ID + 1, config.model.vocab_size, shape, dtype=np.int32)
  batch = {"inputs": tokens, "targets": tokens}
  runner = make_runner(config_lib.run_settings(config), model, tx, schedule, batch)
  state = runner.init_state(jax.random.PRNGKey(0))
  temp_bytes = runner.step_temp_bytes(state, batch)
  holder = {"state": state}

  def step():
    holder["state"], metrics = runner.train_step(holder["state"], batch)
    jax.block_until_ready(metrics)

  step()
  return {**_timed_ms(step, reps), "temp_mib": None if temp_bytes is None else temp_bytes / MIB,
          "tokens": int(np.prod(shape))}


def decode_step(config, batch: int, length: int, reps: int) -> dict:
  """Median ms of one cached decode step of the language model for `batch` rows after `length` positions (the
  cache's counters there, `generator.cache_at`), and the decode state's MiB (every cache array)."""
  model = tasks.build_model(config)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32))["params"]
  cache = jax.jit(lambda p: generator.cache_at(model, p, batch, length))(params)
  ids = jnp.full((batch, 1), UNK_ID + 1, jnp.int32)
  compiled = jax.jit(lambda p, i, c: generator.feed(model, p, i, c)).lower(params, ids, cache).compile()
  step = lambda: jax.block_until_ready(compiled(params, ids, cache)[0])
  step()
  return {**_timed_ms(step, reps), "state_mib": sum(x.nbytes for x in jax.tree.leaves(cache)) / MIB,
          "batch": batch, "length": length}
