"""Scale-out on 8 fake CPU devices: one step gives the same result under every wrapper and mesh; checkpoints
move between topologies; two processes with jax.distributed match one process."""

import functools
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from helpers import REPO, make_parallel_runner
from helpers import parallel_batch as batch
from jformer import checkpoint
from jformer.parallel import mesh


@functools.lru_cache(maxsize=None)
def make(layout):
  """The runner of each layout, built once for this module: its compiled steps serve every test that uses it."""
  return make_parallel_runner(layout)


@pytest.fixture(scope="module")
def reference():
  runner = make("one_device")
  state = runner.init_state(jax.random.PRNGKey(0))
  for seed in range(2):
    state, metrics = runner.train_step(state, batch(seed))
  return metrics, jax.device_get(runner.checkpoint_view(state).params)


# By default the mesh runner on all three axes; the pmap runner (8 replicas) in the integration tier; data8 (the mesh
# runner's data axis alone) in the slow run: it still saves the checkpoint restored on other meshes below.
@pytest.mark.parametrize("layout", [pytest.param("data8", marks=pytest.mark.slow), "data2_fsdp2_tensor2",
                                    pytest.param("pmap8", marks=pytest.mark.integration)])
def test_training_steps_match_one_device(layout, reference):
  runner = make(layout)
  state = runner.init_state(jax.random.PRNGKey(0))
  assert runner.step_temp_bytes(state, batch(0)) > 0  # compiled ahead of the first step, without running it.
  for seed in range(2):
    state, metrics = runner.train_step(state, batch(seed))
  ref_metrics, ref_params = reference
  np.testing.assert_allclose(metrics["loss"], ref_metrics["loss"], atol=1e-5)
  for a, b in zip(jax.tree.leaves(jax.device_get(runner.checkpoint_view(state).params)), jax.tree.leaves(ref_params),
                  strict=True):
    np.testing.assert_allclose(a, b, atol=1e-5)
  if layout != "pmap8":
    sums = runner.eval_step(state.params, batch(5))
    assert sums["tokens"] == float((batch(5)["targets"] != 0).sum())


@pytest.mark.integration  # trains or decodes a model for seconds: the integration tier.
def test_checkpoint_saved_on_data8_restores_on_other_meshes(tmp_path):
  saver = make("data8")
  state = saver.init_state(jax.random.PRNGKey(0))
  state, _ = saver.train_step(state, batch(0))
  with checkpoint.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
    ckpt.save(1, saver.checkpoint_view(state), force=True)
  saved = jax.device_get(state.params)
  for layout in ("fsdp4_tensor2", "one_device", "pmap8"):
    runner = make(layout)
    with checkpoint.Checkpointer(tmp_path, read_only=True) as ckpt:
      restored = runner.from_checkpoint(ckpt.restore(runner.abstract_state()))
    for a, b in zip(jax.tree.leaves(jax.device_get(runner.checkpoint_view(restored).params)), jax.tree.leaves(saved),
                    strict=True):
      np.testing.assert_array_equal(a, b)
    runner.train_step(restored, batch(1))  # and it trains on.


def test_parameters_and_optimizer_state_are_really_sharded():
  from jax.sharding import PartitionSpec as P

  sharded = make("fsdp4_tensor2")
  state = sharded.init_state(jax.random.PRNGKey(0))
  layer = state.params["encoder"]["layer_0"]
  assert layer["feed_forward"]["wi"]["kernel"].sharding.spec == P("fsdp", "tensor")  # [embed, mlp]
  assert layer["feed_forward"]["wo"]["kernel"].sharding.spec == P("tensor", "fsdp")  # [mlp, embed]
  assert layer["self_attention"]["query"]["kernel"].sharding.spec == P("fsdp", "tensor", None)  # [embed, heads, k]
  assert layer["self_attention"]["out"]["kernel"].sharding.spec == P("tensor", None, "fsdp")  # [heads, k, embed]
  assert state.params["shared_embedding"]["embedding"].sharding.spec == P("tensor", "fsdp")  # [vocab, embed]
  kernel = layer["feed_forward"]["wi"]["kernel"]
  assert kernel.addressable_shards[0].data.shape == (32 // 4, 64 // 2)
  mu = state.opt_state[0].mu["encoder"]["layer_0"]["feed_forward"]["wi"]["kernel"]  # Adam moments follow.
  assert mu.sharding.spec == P("fsdp", "tensor")

  single = make("one_device")
  single_state = single.init_state(jax.random.PRNGKey(0))
  from jformer.train.runner import _bytes_per_device

  for part in ("params", "opt_state"):
    ratio = _bytes_per_device(getattr(state, part)) / _bytes_per_device(getattr(single_state, part))
    assert ratio < 0.2, (part, ratio)  # big kernels / 8; biases and norms partly replicated.
  assert "fsdp=4, sequence=1, tensor=2" in sharded.describe(state)


def test_mesh_shape_resolution_and_errors():
  shape = mesh.mesh_shape({"data": -1, "fsdp": 2, "tensor": 2}, 8)
  assert shape == {"data": 2, "fsdp": 2, "sequence": 1, "tensor": 2}  # an axis not named has one device.
  assert mesh.mesh_shape({"data": 1, "fsdp": 1, "tensor": 1}, 8) == {"data": 1, "fsdp": 1, "sequence": 1, "tensor": 1}
  assert mesh.mesh_shape({"data": 2, "fsdp": 1, "sequence": -1, "tensor": 1}, 8)["sequence"] == 4
  with pytest.raises(ValueError, match="only one of"):
    mesh.mesh_shape({"data": -1, "fsdp": -1, "tensor": 1}, 8)
  with pytest.raises(ValueError, match="needs 16 devices but 8"):
    mesh.mesh_shape({"data": 4, "fsdp": 4, "tensor": 1}, 8)
  with pytest.raises(ValueError, match="not divisible"):
    mesh.mesh_shape({"data": -1, "fsdp": 3, "tensor": 1}, 8)
  runner = make("data8")
  with pytest.raises(ValueError, match="not divisible by data x fsdp = 8"):
    runner.shard_batch(batch(rows=12))


MULTIHOST_SCRIPT = r"""
import os, sys
process_id, num_processes, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
devices_per_process = 4 // num_processes
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]  # this checkout's jformer, and tests/helpers.py.
import xla_flags
os.environ["XLA_FLAGS"] = xla_flags.with_devices(devices_per_process)
os.environ["JAX_PLATFORMS"] = "cpu"
from jformer import parallel
if num_processes > 1:
  assert parallel.initialize_distributed(f"localhost:{port}", num_processes, process_id)
import jax, numpy as np
import helpers
assert jax.device_count() == 4 and jax.process_count() == num_processes
config = helpers.parallel_config(**{"parallel.data": -1})
from jformer import config as config_lib, tasks
from jformer.train import optim
from jformer.train.runner import make_runner
model = tasks.build_model(config)
tx, schedule = optim.build_optimizer(config.optimizer, config.model.d_model)
runner = make_runner(config_lib.run_settings(config), model, tx, schedule,
                     {k: np.zeros((1, 16), np.int32) for k in ("inputs", "targets")})
state = runner.init_state(jax.random.PRNGKey(0))
losses = []
for seed in range(3):
  global_batch = helpers.parallel_batch(seed)
  rows = 16 // num_processes
  local = {k: v[process_id * rows:(process_id + 1) * rows] for k, v in global_batch.items()}
  state, metrics = runner.train_step(state, local)
  losses.append(float(metrics["loss"]))
if process_id == 0:
  np.save(out, np.array(losses))
"""


@pytest.mark.integration
def test_two_processes_match_one_process_with_four_devices(tmp_path):
  script = tmp_path / "multihost.py"
  script.write_text(MULTIHOST_SCRIPT)
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  import portpicker

  port = portpicker.pick_unused_port()
  procs = [subprocess.Popen([sys.executable, str(script), str(i), "2", str(port), str(tmp_path / "two.npy")],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(2)]
  outputs = [p.communicate(timeout=300)[0] for p in procs]
  assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outputs)
  single = subprocess.run([sys.executable, str(script), "0", "1", "0", str(tmp_path / "one.npy")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
  assert single.returncode == 0, single.stderr[-3000:]
  np.testing.assert_allclose(np.load(tmp_path / "two.npy"), np.load(tmp_path / "one.npy"), atol=1e-5)


def test_make_runner_and_placement_take_the_config_as_before_the_settings():
  """Code written before `RunSettings` passes the validated config (and its `parallel` section): the same mesh and
  the same runner kind as from the settings."""
  from helpers import LAYOUTS, parallel_config
  from jformer import config as config_lib
  from jformer import tasks
  from jformer.models import layers
  from jformer.models import attention_cache
  from jformer.train import optim
  from jformer.train.runner import make_runner, placement

  config = parallel_config(**LAYOUTS["data2_fsdp2_tensor2"])
  settings = config_lib.run_settings(config)
  assert config_lib.run_settings(settings) is settings
  old, new = placement(config.parallel), placement(settings.parallel)
  assert dict(old.mesh.shape) == dict(new.mesh.shape) == {"data": 2, "fsdp": 2, "sequence": 1, "tensor": 2}
  model = tasks.build_model(config)
  tx, schedule = optim.build_optimizer(settings.optimizer, settings.model.d_model)
  example = {k: np.zeros((1, 16), np.int32) for k in ("inputs", "targets")}
  assert type(make_runner(config, model, tx, schedule, example)) is type(make_runner(settings, model, tx, schedule,
                                                                                      example))
  assert (layers.CROSS_KEY, layers.heads_major) == (attention_cache.CROSS_KEY, attention_cache.heads_major)
