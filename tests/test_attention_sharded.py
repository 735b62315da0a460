"""The Pallas kernels on a device mesh (8 fake CPU devices, kernels in the Pallas interpreter): given the mesh as an
argument (`mesh=`, a `jformer.axes.Placement`) each device runs the kernel on its share of batch and heads
(`jformer.attention.sharded`), with the numbers of one device and no all-gather of the operands."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from helpers import LAYOUTS, parallel_batch, parallel_config
from jformer import attention, axes, tasks
from jformer import config as config_lib
from jformer.attention import auto, sharded
from jformer.train import optim
from jformer.train.runner import make_runner

# (variant, options, length, key/value heads): splash pads to 128-wide blocks, so it gets that length.
KERNELS = {
    "splash_gqa": ("splash", dict(block_q=128, block_kv=128), 128, 1),
    "splash": ("splash", dict(block_q=128, block_kv=128), 128, 2),
    "pallas_gpu": ("pallas_gpu", dict(block_q=8, block_k=8, block_backward=8), 16, 2),
}
MESHES = {"data2_fsdp2_tensor2": (2, 2, 2), "data2_tensor4": (2, 1, 4)}  # 2 heads on 4 tensor devices: not split.


def mesh_of(shape):
  """The mesh of (data, fsdp, tensor) sizes `shape`, one device along sequence."""
  data, fsdp, tensor = shape
  return Mesh(np.asarray(jax.devices()[:data * fsdp * tensor]).reshape(data, fsdp, 1, tensor), axes.MESH_AXES)


def problem(length, kv_heads, batch=4, heads=2, head_dim=8):
  """Query, key, value and packed segment ids (two examples, padding at the end of row 0), causal."""
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (batch, length, h, head_dim))
             for i, h in enumerate((heads, kv_heads, kv_heads)))
  ids = jnp.broadcast_to(jnp.where(jnp.arange(length) < length // 2 + 3, 1, 2), (batch, length))
  return q, k, v, ids.at[0, -5:].set(0)


def output_and_grads(name, options, mesh=None):
  def attend(q, k, v, ids):
    return attention.get(name).fn(q, k, v, causal=True, q_segment_ids=ids, kv_segment_ids=ids, **options,
                                  mesh=None if mesh is None else axes.Placement(mesh))

  def loss(q, k, v, ids):
    return jnp.sum(jnp.where((ids != 0)[:, :, None, None], attend(q, k, v, ids), 0.0) ** 2)

  return lambda q, k, v, ids: (attend(q, k, v, ids), jax.grad(loss, argnums=(0, 1, 2))(q, k, v, ids))


def shardings(mesh, kv_heads):
  batch = PartitionSpec(("data", "fsdp"))
  by_heads = lambda heads: NamedSharding(mesh, PartitionSpec(("data", "fsdp"), None,
                                                             "tensor" if heads % mesh.shape["tensor"] == 0 else None))
  return by_heads(2), by_heads(kv_heads), by_heads(kv_heads), NamedSharding(mesh, batch)


# The default run: splash with grouped heads split over tensor devices, splash and pallas_gpu with heads that are not
# (2 heads on 4 tensor devices); the slow run: every kernel on every mesh.
DEFAULT = {("splash_gqa", "data2_fsdp2_tensor2"), ("splash", "data2_tensor4"), ("pallas_gpu", "data2_tensor4")}


@pytest.mark.parametrize("kernel, mesh_shape", [
    pytest.param(kernel, mesh_shape, marks=() if (kernel, mesh_shape) in DEFAULT else pytest.mark.slow)
    for kernel in KERNELS for mesh_shape in MESHES])
def test_kernel_on_a_mesh_equals_one_device_without_gathering(kernel, mesh_shape):
  name, options, length, kv_heads = KERNELS[kernel]
  mesh = mesh_of(MESHES[mesh_shape])
  args = problem(length, kv_heads)
  want_out, want_grads = jax.jit(output_and_grads(name, options))(*args)
  step = jax.jit(output_and_grads(name, options, mesh), in_shardings=shardings(mesh, kv_heads))
  compiled = step.lower(*args).compile()  # compiled once: the program run here is the one inspected below.
  out, grads = compiled(*args)
  rows = np.asarray(args[3] != 0)
  np.testing.assert_allclose(np.asarray(out)[rows], np.asarray(want_out)[rows], atol=1e-5)
  for got, want in zip(grads, want_grads, strict=True):
    np.testing.assert_allclose(got, want, atol=1e-5)
  assert out.sharding.spec[0] == ("data", "fsdp")  # each device keeps its rows.
  assert "all-gather" not in compiled.as_text()


def test_without_the_mesh_the_kernel_gathers_its_operands():
  """What `sharded` avoids: the same jit, the kernel given no mesh, gathers q/k/v."""
  name, options, length, kv_heads = KERNELS["splash"]
  mesh = mesh_of(MESHES["data2_fsdp2_tensor2"])
  step = jax.jit(output_and_grads(name, options), in_shardings=shardings(mesh, kv_heads))
  assert "all-gather" in step.lower(*problem(length, kv_heads)).compile().as_text()


def test_one_device_or_no_rules_calls_the_kernel_directly():
  """No shard_map without a mesh of several devices and rules that map 'batch' / 'heads' onto it."""
  seen = []
  kernel = lambda q, k, v, q_ids, kv_ids: seen.append((q.shape, k.shape, q_ids is None, kv_ids)) or q
  q, k, v, ids = problem(8, 1)
  sharded.per_device(kernel, q, k, v, ids[:1], mesh=None)  # no mesh
  sharded.per_device(kernel, q, k, v, mesh=axes.Placement(mesh_of(MESHES["data2_fsdp2_tensor2"]), rules=()))
  sharded.per_device(kernel, q, k, v, mesh=axes.Placement(mesh_of((1, 1, 1))))  # rules, one device
  assert seen == [((4, 8, 2, 8), (4, 8, 1, 8), False, None)] + [((4, 8, 2, 8), (4, 8, 1, 8), True, None)] * 2


def test_each_device_gets_its_share_and_grouped_heads_follow_their_queries():
  """Inside shard_map on (data 2, fsdp 2, tensor 2): 1 of 4 rows and 1 of 2 query heads; 1 key/value head is
  repeated to 2 so each device holds the one its query head uses; segment ids `[1, T]` broadcast to the batch."""
  seen = []

  def kernel(q, k, v, q_ids, kv_ids):
    seen.append((q.shape, k.shape, q_ids.shape, kv_ids))
    return q

  q, k, v, ids = problem(8, 1)
  mesh = mesh_of(MESHES["data2_fsdp2_tensor2"])
  run = jax.jit(functools.partial(sharded.per_device, kernel, mesh=axes.Placement(mesh)),
                in_shardings=shardings(mesh, 1)[:3] + (NamedSharding(mesh, PartitionSpec()),))
  np.testing.assert_array_equal(run(q, k, v, ids[:1]), q)
  assert seen == [((1, 8, 1, 8), (1, 8, 1, 8), (1, 8), None)]


@pytest.mark.slow  # ~30 s: a train step whose attentions run the splash kernel interpreted, per device.
def test_mesh_runner_trains_with_splash_as_with_dot_product(monkeypatch):
  """The model holds the runner's mesh and passes it to the kernels: one training step of `auto` on a (pretended)
  TPU, so splash (interpreted, run per device) for every attention, on data 2 x fsdp 2 x tensor 2, gives
  dot_product's loss and parameters."""
  monkeypatch.setattr(auto, "_backend", lambda: "tpu")
  chosen, run, specs, shard_map = [], auto._run, [], jax.shard_map
  monkeypatch.setattr(auto, "_run", lambda choice, *args: chosen.append(choice.kernel) or run(choice, *args))
  monkeypatch.setattr(jax, "shard_map",
                      lambda f, **kwargs: specs.append(kwargs["in_specs"][0]) or shard_map(f, **kwargs))
  results = {}
  for name in ("auto", "dot_product"):
    config = parallel_config(**LAYOUTS["data2_fsdp2_tensor2"], **{"model.attention": name})
    model = tasks.build_model(config)
    tx, schedule = optim.build_optimizer(config.optimizer, config.model.d_model)
    runner = make_runner(config_lib.run_settings(config), model, tx, schedule,
                         {k: np.zeros((1, 16), np.int32) for k in ("inputs", "targets")})
    state, metrics = runner.train_step(runner.init_state(jax.random.PRNGKey(0)), parallel_batch(0))
    results[name] = metrics["loss"], jax.device_get(state.params)
  # Every call is splash, run per device: in the train step (encoder, decoder, cross-attention) 4 rows and 2 of the
  # 4 heads on each; initialization (traced twice: shapes, then the sharded init) splits only the heads, its 1-row
  # example batch not being divisible by data x fsdp.
  assert set(chosen) == {"splash"}
  assert specs == [PartitionSpec(None, None, "tensor", None)] * 6 + [PartitionSpec(("data", "fsdp"), None, "tensor",
                                                                                   None)] * 3
  np.testing.assert_allclose(results["auto"][0], results["dot_product"][0], atol=1e-5)
  for got, want in zip(jax.tree.leaves(results["auto"][1]), jax.tree.leaves(results["dot_product"][1]), strict=True):
    np.testing.assert_allclose(got, want, atol=1e-5)
