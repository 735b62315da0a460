"""Two thin wrappers around the one pure train step: `MeshRunner` (jit over a `jformer.parallel` mesh, shardings from
its logical-axis rules) and `PmapRunner` (classic data parallel, gradients summed over the 'batch' axis).

Both take host-local numpy batches (each host's share of the global batch) and return the step's metrics as
device arrays: nothing waits for the step. `add_to_totals` sums them on device (`jformer.train.step.add_to_totals`)
and `read_totals` is the one host round trip, made every so many steps. `checkpoint_view` / `from_checkpoint`
convert between the running state and what is saved, so a checkpoint written under one topology restores under
any other.
"""

from __future__ import annotations

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from jformer import axes, parallel
from jformer.axes import PMAP_AXIS
from jformer.config import RunSettings, run_settings
from jformer.config.schema import ParallelSection
from jformer.train.state import init_train_state
from jformer.train.step import add_to_totals, make_eval_step, make_train_step, new_totals


def _bytes_per_device(tree) -> int:
  """Bytes that one device (the first) holds of the arrays in `tree`."""
  return sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(tree) if leaf.addressable_shards)


class _Runner:
  """What both runners share: running totals of train-step metrics kept on device (`jformer.train.step.new_totals`:
  `new_totals()` empty ones, `add_to_totals(totals, metrics)` a step's added, `totals` donated) and the train step's
  temporary memory."""

  def _build_totals(self, allowed_skips: int, sharding=None):
    self.new_totals = jax.jit(new_totals, out_shardings=sharding)
    self.add_to_totals = jax.jit(functools.partial(add_to_totals, allowed_skips=allowed_skips),
                                 out_shardings=sharding, donate_argnums=0)

  def read_totals(self, totals) -> dict:
    """The totals as host numbers: the loop's one host round trip, made every `train.log_every` steps."""
    return jax.device_get(totals)

  def lower_step(self, state, local_batch):
    """The train step lowered for `state` (or `abstract_state()`: nothing allocated) and a batch, not run: what
    its memory and cost analyses read once compiled."""
    return self._train_step.lower(state, self.shard_batch(local_batch))

  def step_temp_bytes(self, state, local_batch) -> int | None:
    """Temporary memory per device of the compiled train step for this state and batch, None where the backend does
    not report it (`memory_analysis()`). The jitted step's own first call reuses this compilation (JAX's
    compilation cache)."""
    try:
      analysis = self.lower_step(state, local_batch).compile().memory_analysis()
    except NotImplementedError:
      return None
    return None if analysis is None else int(analysis.temp_size_in_bytes)


class MeshRunner(_Runner):
  """`jax.jit` over a ('data', 'fsdp', 'sequence', 'tensor') mesh; the state is created already sharded, batches
  split by rows (data x fsdp) and by tokens (sequence). The model holds the same mesh (`model.mesh`, a
  `jformer.axes.Placement`), which its attention kernels run per device on."""
  mode = parallel.MESH

  def __init__(self, model, tx, schedule, *, label_smoothing: float, grad_accumulation_steps: int,
               example_batch: dict, allowed_skips: int = 0, attention_transfer: int = 0):
    if model.mesh is None:
      raise ValueError("the mesh runner runs a model built with its mesh (tasks.build_model(config, "
                       "mesh=runner.placement(settings.parallel)), or use make_runner")
    self.mesh = model.mesh.mesh
    self.model, self.tx = model, tx
    boxed = jax.eval_shape(lambda rng: init_train_state(model, tx, rng, example_batch, boxed=True),
                           jax.random.PRNGKey(0))
    self.state_sharding = nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed), self.mesh, axes.RULES)
    self._init = jax.jit(lambda rng: init_train_state(model, tx, rng, example_batch),
                         out_shardings=self.state_sharding)
    # Rows over data x fsdp, each row's tokens over sequence (context parallelism; 1 device: whole rows).
    self.batch_sharding = nn.logical_to_mesh_sharding(PartitionSpec(axes.BATCH, axes.LENGTH), self.mesh, axes.RULES)
    self._batch_parallelism = self.mesh.shape[axes.DATA] * self.mesh.shape[axes.FSDP]
    self._sequence_parallelism = self.mesh.shape[axes.SEQUENCE]
    step = make_train_step(model, tx, schedule, label_smoothing=label_smoothing,
                           grad_accumulation_steps=grad_accumulation_steps, attention_transfer=attention_transfer)
    self._train_step = jax.jit(step, in_shardings=(self.state_sharding, self.batch_sharding),
                               out_shardings=(self.state_sharding, None), donate_argnums=0)
    self._eval_step = jax.jit(make_eval_step(model),
                              in_shardings=(self.state_sharding.params, self.batch_sharding))
    self._build_totals(allowed_skips, NamedSharding(self.mesh, PartitionSpec()))

  def init_state(self, rng):
    return self._init(rng)

  def abstract_state(self):
    """ShapeDtypeStructs with this mesh's shardings: the restore target of any checkpoint."""
    shapes = jax.eval_shape(self._init, jax.random.PRNGKey(0))
    return jax.tree.map(lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), shapes,
                        self.state_sharding)

  def shard_batch(self, local_batch: dict) -> dict:
    global_rows = next(iter(local_batch.values())).shape[0] * jax.process_count()
    if global_rows % self._batch_parallelism:
      raise ValueError(f"global batch of {global_rows} rows is not divisible by data x fsdp = "
                       f"{self._batch_parallelism}; change data.batch_size or the mesh")
    length = next(iter(local_batch.values())).shape[1]
    if length % self._sequence_parallelism:
      raise ValueError(f"rows of {length} tokens are not divisible by parallel.sequence = "
                       f"{self._sequence_parallelism}; change data.max_length or parallel.sequence")
    return {k: jax.make_array_from_process_local_data(self.batch_sharding, np.asarray(v))
            for k, v in local_batch.items()}

  def train_step(self, state, local_batch):
    """(new state, the step's metrics), both on device."""
    return self._train_step(state, self.shard_batch(local_batch))

  def eval_step(self, params, local_batch):
    return jax.device_get(self._eval_step(params, self.shard_batch(local_batch)))

  def checkpoint_view(self, state):
    return state

  def from_checkpoint(self, state):
    return state

  def device_params(self, params):
    """Host parameters (e.g. averaged ones, whole on every process) laid out as the state's for `eval_step`."""
    return jax.tree.map(lambda x, sharding: jax.make_array_from_callback(x.shape, sharding, lambda index: x[index]),
                        params, self.state_sharding.params)

  def host_params(self, state):
    """Parameters usable by a single-host decoder (gathered from every host when there are several)."""
    # tiled=True: each parameter is one global array, gathered whole (tiled=False refuses global arrays).
    return multihost_utils.process_allgather(state.params, tiled=True) if jax.process_count() > 1 else state.params

  def describe(self, state) -> str:
    mesh = ", ".join(f"{axis}={size}" for axis, size in self.mesh.shape.items())
    return (f"mesh ({mesh}) over {jax.device_count()} {jax.devices()[0].platform} devices, "
            f"{jax.process_count()} process(es); per device: parameters "
            f"{_bytes_per_device(state.params) / 2**20:,.1f} MiB, optimizer state "
            f"{_bytes_per_device(state.opt_state) / 2**20:,.1f} MiB")


class PmapRunner(_Runner):
  """Classic data parallelism: `jax.pmap` of the same step, gradients summed over the 'batch' axis."""
  mode = parallel.PMAP

  def __init__(self, model, tx, schedule, *, label_smoothing: float, grad_accumulation_steps: int,
               example_batch: dict, allowed_skips: int = 0, attention_transfer: int = 0):
    if model.mesh is not None:
      raise ValueError("the pmap runner runs the whole step on each device: build its model without a mesh")
    self.devices = jax.local_devices()
    self._init = jax.jit(lambda rng: init_train_state(model, tx, rng, example_batch))
    step = make_train_step(model, tx, schedule, label_smoothing=label_smoothing,
                           grad_accumulation_steps=grad_accumulation_steps, axis_name=PMAP_AXIS,
                           attention_transfer=attention_transfer)
    self._train_step = jax.pmap(step, axis_name=PMAP_AXIS, donate_argnums=0)
    self._eval_step = jax.pmap(make_eval_step(model, axis_name=PMAP_AXIS), axis_name=PMAP_AXIS)
    self._build_totals(allowed_skips)

  def init_state(self, rng):
    return self.from_checkpoint(self._init(rng))

  def abstract_state(self):
    device = jax.sharding.SingleDeviceSharding(self.devices[0])
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=device),
                        jax.eval_shape(self._init, jax.random.PRNGKey(0)))

  def shard_batch(self, local_batch: dict) -> dict:
    n = len(self.devices)
    rows = next(iter(local_batch.values())).shape[0]
    if rows % n:
      raise ValueError(f"per-host batch of {rows} rows is not divisible by the {n} local devices")
    return {k: np.asarray(v).reshape((n, rows // n) + v.shape[1:]) for k, v in local_batch.items()}

  def train_step(self, state, local_batch):
    """(new state, the step's metrics), both on device; the metrics are the first device's (all devices hold
    the same values, reduced over the 'batch' axis)."""
    state, metrics = self._train_step(state, self.shard_batch(local_batch))
    return state, _first_replica(metrics)

  def eval_step(self, params, local_batch):
    return jax.device_get(_first_replica(self._eval_step(params, self.shard_batch(local_batch))))

  def checkpoint_view(self, state):
    """The state of device 0 (all replicas are equal), copied: the next step donates the state's buffers, while
    an asynchronous save may still read this view."""
    return jax.tree.map(jnp.copy, _first_replica(state))

  def from_checkpoint(self, state):
    """Stacks one copy per local device along a leading axis, laid out as pmap expects."""
    return self.device_params(state)

  def device_params(self, params):
    """Host parameters (e.g. averaged ones), or a state, stacked one copy per local device as pmap expects."""
    sharding = NamedSharding(jax.sharding.Mesh(np.asarray(self.devices), (PMAP_AXIS,)), PartitionSpec(PMAP_AXIS))
    n = len(self.devices)
    return jax.tree.map(lambda x: jax.device_put(jnp.broadcast_to(x, (n,) + x.shape), sharding), params)

  def host_params(self, state):
    return jax.tree.map(jnp.copy, _first_replica(state.params))

  def describe(self, state) -> str:
    one = self.checkpoint_view(state)
    return (f"pmap over {len(self.devices)} local {self.devices[0].platform} devices x {jax.process_count()} "
            f"process(es); per device: parameters {_bytes_per_device(one.params) / 2**20:,.1f} MiB, optimizer "
            f"state {_bytes_per_device(one.opt_state) / 2**20:,.1f} MiB (replicated)")


def _first_replica(tree):
  """Device 0's copy of every leaf of `tree`, values pmap keeps one of per local device (leading axis): that
  device's buffer itself, without computing anything (no indexing op to compile and run over all devices)."""

  def first(x):
    shard = x.addressable_data(0)
    return shard if shard.shape == x.shape[1:] else shard.reshape(x.shape[1:])

  return jax.tree.map(first, tree)


RUNNERS = {runner.mode: runner for runner in (MeshRunner, PmapRunner)}


def eval_step_for_host_params(runner, params):
  """`runner.eval_step` for code that is handed host parameters (`host_params`, or averaged ones): a task's final
  test decodes with `params` and scores with this. `params` are laid out for the devices once (`device_params`:
  one copy per device under pmap, the state's shardings on a mesh); other host parameters passed to it are laid
  out at that call."""
  placed = runner.device_params(params)
  return lambda given, local_batch: runner.eval_step(placed if given is params else runner.device_params(given),
                                                     local_batch)


def placement(settings: ParallelSection) -> axes.Placement | None:
  """The mesh the model is built with (`tasks.build_model(config, mesh=...)`): `parallel.mode='mesh'`'s, over the
  configured axes; None under pmap (each device runs the whole step on its own rows). Takes the config's `parallel`
  section too, as it did before the settings."""
  if settings.mode != parallel.MESH:
    return None
  fields = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else settings
  return axes.Placement(parallel.make_mesh(fields), context_strategy=settings.context_strategy)


def make_runner(settings: RunSettings, model, tx, schedule, example_batch: dict):
  """The runner `parallel.mode` names, for `model` and the optimizer. The model runs on the mesh it was built with
  (`tasks.build_model(config, mesh=placement(settings.parallel))`, as the train loop builds it); one built without
  (a test's, a benchmark's) is given `placement(settings.parallel)` here. A validated config serves as well."""
  settings = run_settings(settings)
  mode, train = settings.parallel.mode, settings.train
  wanted = None if mode != parallel.MESH else placement(settings.parallel) if model.mesh is None else model.mesh
  if wanted is not model.mesh:
    model = model.clone(mesh=wanted)
  return RUNNERS[mode](model, tx, schedule, label_smoothing=train.label_smoothing, example_batch=example_batch,
                       grad_accumulation_steps=train.grad_accumulation_steps,
                       allowed_skips=train.skip_nonfinite_updates, attention_transfer=train.attention_transfer)
