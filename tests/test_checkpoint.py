"""Checkpointer (save/restore of state + grain iterator, async, pruning, intervals) and parameter averaging."""

from __future__ import annotations

import functools
import shutil

import flax
import grain
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from jformer.checkpoint import Checkpointer, abstract_state, average_params, load_params, save_params

TX = optax.adam(1e-3)


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: dict
  opt_state: optax.OptState
  rng: jax.Array


def make_state(seed: int, *, updates: int = 1) -> TrainState:
  """A TrainState with seed-dependent params and an Adam state after `updates` real updates."""
  key = jax.random.key(seed)
  k1, k2, k3 = jax.random.split(key, 3)
  params = {
      "dense": {"kernel": jax.random.normal(k1, (8, 4)), "bias": jax.random.normal(k2, (4,)).astype(jnp.bfloat16)},
      "embed": jax.random.normal(k3, (5, 8)),
  }
  opt_state = TX.init(params)
  for i in range(updates):
    grads = jax.tree.map(functools.partial(jnp.full_like, fill_value=0.1 * (i + 1)), params)
    step_updates, opt_state = TX.update(grads, opt_state, params)
    params = optax.apply_updates(params, step_updates)
  step = jnp.asarray(updates, jnp.int32)
  return TrainState(step=step, params=params, opt_state=opt_state, rng=jax.random.key(seed + 100))


def assert_states_equal(got: TrainState, want: TrainState) -> None:
  assert isinstance(got, TrainState)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  assert jax.random.key_data(got.rng).tolist() == jax.random.key_data(want.rng).tolist()
  assert got.rng.dtype == want.rng.dtype
  for g, w in zip(jax.tree.leaves(got.replace(rng=None)), jax.tree.leaves(want.replace(rng=None)), strict=True):
    assert g.dtype == w.dtype
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def make_iterator() -> grain.DatasetIterator:
  return iter(grain.MapDataset.range(100).shuffle(seed=0).batch(4).to_iter_dataset())


def params_of(state: TrainState) -> dict:
  return jax.tree.map(np.asarray, state.params)


def test_round_trip_same_manager_and_fresh_manager(tmp_path):
  state = make_state(0, updates=3)
  with Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
    assert ckpt.latest_step() is None
    assert ckpt.save(3, state)
    ckpt.wait()
    assert ckpt.latest_step() == 3
    assert_states_equal(ckpt.restore(make_state(1)), state)
  with Checkpointer(tmp_path) as fresh:
    assert fresh.all_steps() == [3]
    assert_states_equal(fresh.restore(make_state(1)), state)
  with Checkpointer(tmp_path, read_only=True) as reader:
    assert_states_equal(reader.restore(make_state(1)), state)


def test_restore_into_abstract_template_with_other_sharding(tmp_path):
  mesh = jax.make_mesh((8,), ("data",))
  row_sharded = NamedSharding(mesh, PartitionSpec("data"))
  state = make_state(0)
  state = state.replace(params={**state.params, "dense": {
      **state.params["dense"], "kernel": jax.device_put(state.params["dense"]["kernel"], row_sharded)}})
  with Checkpointer(tmp_path, save_interval_steps=1, async_save=False) as ckpt:
    ckpt.save(1, state)
  replicated = NamedSharding(mesh, PartitionSpec())
  template = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=replicated),
                          jax.eval_shape(make_state, 5))
  with Checkpointer(tmp_path) as ckpt:
    restored = ckpt.restore(template)
  assert restored.params["dense"]["kernel"].sharding == replicated
  assert restored.rng.sharding == replicated
  assert_states_equal(restored, state)


def test_relative_directories_work(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with Checkpointer("runs/ckpt", save_interval_steps=1) as ckpt:
    ckpt.save(1, make_state(2))
    assert ckpt.directory == tmp_path / "runs" / "ckpt"
    assert_states_equal(ckpt.restore(make_state(0)), make_state(2))
  save_params("averaged", params_of(make_state(2)))
  np.testing.assert_array_equal(load_params("averaged")["embed"], params_of(make_state(2))["embed"])


def test_template_leaf_without_sharding_is_rejected(tmp_path):
  with Checkpointer(tmp_path, save_interval_steps=1, async_save=False) as ckpt:
    ckpt.save(1, make_state(0))
    with pytest.raises(ValueError, match=r"Template leaf \.step is a jax.ShapeDtypeStruct without a sharding"):
      ckpt.restore(jax.eval_shape(make_state, 0))


def test_async_save_snapshots_state_and_iterator_before_returning(tmp_path):
  state = make_state(0, updates=2)
  iterator = make_iterator()
  next(iterator)
  with Checkpointer(tmp_path, save_interval_steps=1, async_save=True) as ckpt:
    assert ckpt.save(2, state, iterator)
    # The caller may reuse the device buffers and advance the iterator while the write is in flight.
    for leaf in jax.tree.leaves(state):
      leaf.delete()
    expected_batches = [next(iterator) for _ in range(3)]
    ckpt.wait()
  fresh_iterator = make_iterator()
  with Checkpointer(tmp_path) as fresh:
    restored = fresh.restore(make_state(1), fresh_iterator)
  assert_states_equal(restored, make_state(0, updates=2))
  for want_batch in expected_batches:
    np.testing.assert_array_equal(next(fresh_iterator), want_batch)


def test_data_iterator_round_trip_gives_identical_next_batches(tmp_path):
  iterator = make_iterator()
  for _ in range(5):
    next(iterator)
  with Checkpointer(tmp_path, save_interval_steps=5) as ckpt:
    ckpt.save(5, make_state(0), iterator)
    expected = [next(iterator) for _ in range(4)]
    for _ in range(6):  # advance past the saved position before restoring in place
      next(iterator)
    ckpt.restore(make_state(0), iterator)
    np.testing.assert_array_equal(np.stack([next(iterator) for _ in range(4)]), np.stack(expected))
  fresh_iterator = make_iterator()
  with Checkpointer(tmp_path) as fresh:
    fresh.restore(make_state(0), fresh_iterator)
  np.testing.assert_array_equal(np.stack([next(fresh_iterator) for _ in range(4)]), np.stack(expected))


def test_interval_logic_and_force(tmp_path):
  with Checkpointer(tmp_path, save_interval_steps=3, max_to_keep=None) as ckpt:
    saved = [step for step in range(1, 10) if ckpt.save(step, make_state(0))]
    assert saved == [3, 6, 9]
    assert ckpt.save(10, make_state(0), force=True)
    assert not ckpt.save(9, make_state(0))  # not newer than the latest step
    with pytest.raises(ValueError, match="step 10 already exists"):
      ckpt.save(10, make_state(0), force=True)
    assert ckpt.save(jnp.asarray(12), make_state(0))  # a scalar integer array as the step
    ckpt.wait()
    assert ckpt.all_steps() == [3, 6, 9, 10, 12]


def test_keeps_only_the_last_max_to_keep(tmp_path):
  with Checkpointer(tmp_path, save_interval_steps=1, max_to_keep=2) as ckpt:
    for step in range(1, 6):
      ckpt.save(step, make_state(step))
    ckpt.wait()
    assert ckpt.all_steps() == [4, 5]
  assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["4", "5"]
  with Checkpointer(tmp_path) as fresh:
    assert_states_equal(fresh.restore(make_state(0), step=4), make_state(4))


def test_half_written_checkpoint_is_not_latest_and_is_cleaned_up(tmp_path):
  with Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
    ckpt.save(1, make_state(1))
  # A crash during the save of step 7: Orbax's temporary directory, never renamed to `7`.
  partial = tmp_path / "7.orbax-checkpoint-tmp-1700000000000000"
  shutil.copytree(tmp_path / "1", partial)
  with Checkpointer(tmp_path, read_only=True) as reader:
    assert reader.all_steps() == [1]
  assert partial.exists()  # read-only never deletes
  with Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
    assert ckpt.latest_step() == 1
    assert_states_equal(ckpt.restore(make_state(0)), make_state(1))
    ckpt.save(2, make_state(2))  # a writable Checkpointer removes leftovers before its first save
  assert not partial.exists()


def test_restore_params_reads_params_only(tmp_path):
  state = make_state(3)
  with Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
    ckpt.save(1, state)
    ckpt.save(2, {"weights": state.params})
    ckpt.wait()
    params = ckpt.restore_params(1)
    assert jax.tree.structure(params) == jax.tree.structure(params_of(state))
    for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(params_of(state)), strict=True):
      assert isinstance(got, np.ndarray) and got.dtype == want.dtype
      np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=r"no top-level 'params' in its state \(found: \['weights'\]\)"):
      ckpt.restore_params(2)


def test_valid_step_passes_over_an_unreadable_newest_step_and_hashes_a_step_once(tmp_path, monkeypatch):
  """Every file of the newest step scrambled (its metadata no longer reads): `valid_step` names the newest whole step
  without reading the corrupt one's metadata, sets the corrupt one aside, and a step found whole is not hashed again."""
  from jformer.checkpoint import integrity

  with Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
    ckpt.save(1, make_state(1))
    ckpt.save(2, make_state(2))
    ckpt.wait()
  for path in (tmp_path / "2").rglob("*"):
    if path.is_file() and path.name != integrity.MANIFEST:
      path.write_bytes(bytes(b ^ 0xFF for b in path.read_bytes()))
  verified = []
  verify = integrity.verify
  monkeypatch.setattr(integrity, "verify", lambda folder: verified.append(folder.name) or verify(folder))
  with Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
    assert ckpt.valid_step() == 1 and not ckpt.params_only(1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2.corrupt"]
    assert_states_equal(ckpt.restore(make_state(0), step=1), make_state(1))
  assert verified == ["2", "1"]  # step 1 hashed once, for valid_step and restore together.


def test_restore_errors(tmp_path):
  with Checkpointer(tmp_path / "run", save_interval_steps=2) as ckpt:
    with pytest.raises(FileNotFoundError, match="No complete checkpoint in"):
      ckpt.restore(make_state(0))
    ckpt.save(2, make_state(0))
    ckpt.save(4, make_state(0))
    ckpt.wait()
    with pytest.raises(FileNotFoundError, match=r"No checkpoint for step 3 .* the steps there are \[2, 4\]"):
      ckpt.restore(make_state(0), step=3)
    with pytest.raises(ValueError, match="holds no data-iterator state"):
      ckpt.restore(make_state(0), make_iterator())
    with pytest.raises(TypeError, match="data_iterator must be a grain DatasetIterator"):
      ckpt.save(6, make_state(0), iter(range(3)))
    with pytest.raises(TypeError, match="step must be an int"):
      ckpt.save(6.0, make_state(0))
    with pytest.raises(ValueError, match="step must be >= 0"):
      ckpt.save(-2, make_state(0))
  with Checkpointer(tmp_path / "run", read_only=True) as reader, pytest.raises(ValueError, match="is read-only"):
    reader.save(6, make_state(0))
  with pytest.raises(FileNotFoundError, match="does not exist"):
    Checkpointer(tmp_path / "missing", read_only=True)
  with pytest.raises(ValueError, match="max_to_keep must be a positive int or None"):
    Checkpointer(tmp_path / "run", max_to_keep=0)
  with pytest.raises(ValueError, match="save_interval_steps must be a positive int"):
    Checkpointer(tmp_path / "run", save_interval_steps=0)


@pytest.fixture
def three_checkpoints(tmp_path):
  """Checkpoints at steps 10, 20, 30 with different params; returns (directory, {step: params})."""
  directory = tmp_path / "checkpoints"
  saved = {}
  with Checkpointer(directory, save_interval_steps=10) as ckpt:
    for seed, step in enumerate((10, 20, 30)):
      state = make_state(seed, updates=seed + 1)
      ckpt.save(step, state)
      saved[step] = params_of(state)
  return directory, saved


@pytest.mark.parametrize("last", [2, 3])
def test_average_params_is_the_mean_of_the_last_checkpoints(three_checkpoints, last):
  directory, saved = three_checkpoints
  mean, steps = average_params(directory, last=last)
  assert steps == [10, 20, 30][-last:]
  for path in (("dense", "kernel"), ("embed",)):
    want = np.mean([_get(saved[s], path) for s in steps], axis=0)
    got = _get(mean, path)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
  # bfloat16 params are summed in float32 and the mean is rounded back to bfloat16 once.
  want_bias = np.mean([saved[s]["dense"]["bias"].astype(np.float32) for s in steps], axis=0).astype(ml_dtypes.bfloat16)
  assert mean["dense"]["bias"].dtype == ml_dtypes.bfloat16
  np.testing.assert_array_equal(mean["dense"]["bias"], want_bias)


def test_average_params_errors(three_checkpoints, tmp_path):
  directory, _ = three_checkpoints
  with pytest.raises(ValueError, match=r"last 5 checkpoints, but .* has only 3 \(steps \[10, 20, 30\]\)"):
    average_params(directory, last=5)
  with pytest.raises(ValueError, match="last must be a positive int"):
    average_params(directory, last=0)
  (tmp_path / "empty").mkdir()
  with pytest.raises(FileNotFoundError, match=r"No complete checkpoint in .*empty; nothing to average"):
    average_params(tmp_path / "empty")
  with pytest.raises(FileNotFoundError, match="does not exist"):
    average_params(tmp_path / "missing")


def test_save_and_load_averaged_params(three_checkpoints, tmp_path):
  directory, _ = three_checkpoints
  mean, _ = average_params(directory, last=2)
  path = tmp_path / "averaged"
  save_params(path, mean)
  loaded = load_params(path)
  for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(mean), strict=True):
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
  template = make_state(7).params
  restored = load_params(path, template)
  assert jax.tree.structure(restored) == jax.tree.structure(template)
  for got, want, like in zip(jax.tree.leaves(restored), jax.tree.leaves(mean), jax.tree.leaves(template), strict=True):
    assert isinstance(got, jax.Array) and got.sharding == like.sharding and got.dtype == like.dtype
    np.testing.assert_array_equal(np.asarray(got), want)
  assert jax.tree.structure(abstract_state(template)) == jax.tree.structure(template)
  with pytest.raises(FileExistsError, match="pass overwrite=True"):
    save_params(path, mean)
  save_params(path, jax.tree.map(np.zeros_like, mean), overwrite=True)
  assert all(not np.any(leaf) for leaf in jax.tree.leaves(load_params(path)))
  with pytest.raises(FileNotFoundError, match="No params checkpoint at"):
    load_params(tmp_path / "nothing")


def _get(tree: dict, path: tuple[str, ...]) -> np.ndarray:
  for key in path:
    tree = tree[key]
  return tree


def test_restoring_into_another_state_structure_names_the_difference(tmp_path):
  """A checkpoint of another train-state layout (e.g. from an older jformer) is refused with the differing key."""
  with Checkpointer(str(tmp_path)) as checkpointer:
    checkpointer.save(1, {"step": jnp.zeros(()), "params": {"w": jnp.ones(3)}}, force=True)
    checkpointer.wait()
  with Checkpointer(str(tmp_path)) as checkpointer:
    with pytest.raises(ValueError, match=r"checkpoint 1 in .* does not hold the state this run trains .*"
                                         r"skipped_updates.*still serve translate and average-checkpoints"):
      checkpointer.restore({"step": jnp.zeros(()), "params": {"w": jnp.ones(3)}, "skipped_updates": jnp.zeros(())})
