"""Context parallelism on 8 fake CPU devices: attention over rows split along the mesh's `sequence` axis, gathered
or as a ring (`jformer.attention.context_parallel`), gives one device's outputs AND gradients (a ring whose
backward is wrong while its forward is right is the failure to catch), causal and not, packed, windowed, with
grouped key/value heads; a train step with `parallel.sequence=4` gives one device's loss and parameters."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from helpers import REPO, make_parallel_runner, parallel_batch
from jformer import attention, axes
from jformer.attention import context_parallel, flex
from jformer.attention.registry import REGISTRY, register, softmax_weights


def placement(strategy, data=1, sequence=4, tensor=1):
  shape = dict(data=data, fsdp=1, sequence=sequence, tensor=tensor)
  devices = np.asarray(jax.devices()[:data * sequence * tensor]).reshape([shape[a] for a in axes.MESH_AXES])
  return axes.Placement(Mesh(devices, axes.MESH_AXES), context_strategy=strategy)


def problem(length=32, batch=2, heads=4, kv_heads=2, head_dim=8):
  """Query, key, value and packed segment ids: two examples per row (the second starting mid-share), padding at
  the end of row 0."""
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (batch, length, h, head_dim))
             for i, h in enumerate((heads, kv_heads, kv_heads)))
  ids = jnp.broadcast_to(jnp.where(jnp.arange(length) < length // 2 - 3, 1, 2), (batch, length))
  return q, k, v, ids.at[0, -3:].set(0)


# name: (variant, its options, masking). Windows (left, right) reach across shares (8 tokens each on 4 devices).
CASES = {
    "causal_packed_gqa": ("dot_product", {}, dict(causal=True)),
    "causal_packed_gqa_chunked": ("chunked", dict(query_chunk_size=4, key_chunk_size=3), dict(causal=True)),
    "bidirectional_packed_gqa": ("chunked", dict(query_chunk_size=4, key_chunk_size=3), dict()),
    "causal_window": ("dot_product", {}, dict(causal=True, window=(9, 0))),
    "bidirectional_window": ("auto", {}, dict(window=(5, 10))),
    "causal_softcap": ("chunked", dict(query_chunk_size=8, key_chunk_size=8), dict(causal=True, logits_softcap=3.0)),
}
MESHES = {"sequence4_data2": dict(data=2, sequence=4), "sequence8": dict(sequence=8),
          "sequence2_tensor2": dict(data=2, sequence=2, tensor=2)}


@functools.lru_cache(maxsize=None)
def one_device(case):
  """One device's outputs and gradients of CASES[case] on `problem()` (shared by the strategies and meshes)."""
  name, options, masking = CASES[case]
  return jax.jit(output_and_grads(name, options, masking))(*problem())


def output_and_grads(name, options, masking, mesh=None):
  def attend(q, k, v, ids):
    return attention.get(name).fn(q, k, v, q_segment_ids=ids, kv_segment_ids=ids, **masking, **options, mesh=mesh)

  def loss(q, k, v, ids):  # weights every output element differently, so no gradient error cancels.
    out = attend(q, k, v, ids)
    return jnp.sum(jnp.where((ids != 0)[:, :, None, None], out * jnp.cos(jnp.arange(out.size)).reshape(out.shape),
                             0.0))

  return lambda q, k, v, ids: (attend(q, k, v, ids), jax.grad(loss, argnums=(0, 1, 2))(q, k, v, ids))


def shardings(mesh, kv_heads=2):
  """The model's layout: rows over data, tokens over sequence, heads over tensor (when they divide)."""
  by_heads = lambda heads: NamedSharding(mesh, PartitionSpec(
      "data", "sequence", "tensor" if heads % mesh.shape["tensor"] == 0 else None))
  return by_heads(4), by_heads(kv_heads), by_heads(kv_heads), NamedSharding(mesh, PartitionSpec("data", "sequence"))


# The default run: each strategy on the causal, packed, grouped-heads case (4 shares of 2 rows); the slow run: every
# case on every mesh.
DEFAULT = {("gather", "causal_packed_gqa", "sequence4_data2"), ("ring", "causal_packed_gqa", "sequence4_data2")}


@pytest.mark.parametrize("strategy, case, mesh_name", [
    pytest.param(strategy, case, mesh_name, marks=() if (strategy, case, mesh_name) in DEFAULT else pytest.mark.slow)
    for strategy in axes.CONTEXT_STRATEGIES for case in CASES for mesh_name in MESHES])
def test_split_attention_equals_one_device_outputs_and_gradients(strategy, case, mesh_name):
  name, options, masking = CASES[case]
  args = problem()
  want_out, want_grads = one_device(case)
  mesh = placement(strategy, **MESHES[mesh_name])
  step = jax.jit(output_and_grads(name, options, masking, mesh), in_shardings=shardings(mesh.mesh))
  compiled = step.lower(*args).compile()
  out, grads = compiled(*args)
  rows = np.asarray(args[3] != 0)  # a query that sees no key (padding) has an unspecified output.
  np.testing.assert_allclose(np.asarray(out)[rows], np.asarray(want_out)[rows], atol=2e-6)
  for got, want in zip(grads, want_grads, strict=True):
    np.testing.assert_allclose(got, want, atol=2e-5)
  program = compiled.as_text()
  if strategy == "ring":  # blocks pass from device to device; nothing is gathered.
    assert "collective-permute" in program and "all-gather" not in program
  else:
    assert "all-gather" in program
  assert out.sharding.spec[1] == "sequence"  # each device keeps its share of the tokens.


def test_balanced_order_gives_device_d_halves_d_and_mirror_and_back():
  """On 4 shares of 16 tokens (halves of 2): device d holds halves d and 7 - d, and the way back restores the row."""
  how = context_parallel.Split(placement("gather", sequence=4), (axes.SEQUENCE,), 4, balanced=True)
  tokens = jnp.arange(16)[None]

  def there_and_back(x):
    balanced = context_parallel._reorder(how, x, to_balanced=True)
    return balanced, context_parallel._reorder(how, balanced, to_balanced=False)

  row = PartitionSpec(None, axes.SEQUENCE)
  balanced, back = jax.jit(jax.shard_map(there_and_back, mesh=how.placement.mesh, in_specs=row,
                                         out_specs=(row, row)))(tokens)
  np.testing.assert_array_equal(balanced[0], [0, 1, 14, 15, 2, 3, 12, 13, 4, 5, 10, 11, 6, 7, 8, 9])
  np.testing.assert_array_equal(balanced[0], context_parallel.balanced_order(4, 16))
  np.testing.assert_array_equal(back, tokens)


def test_which_calls_split():
  """A call splits when the mesh has a sequence axis dividing both lengths; causal ones of 2n halves balance."""
  mesh = placement("ring", sequence=4)
  q, k = jnp.zeros((2, 32, 4, 8)), jnp.zeros((2, 16, 4, 8))
  assert context_parallel.split(mesh, q, q, causal=True).balanced
  assert not context_parallel.split(mesh, q, q, causal=False).balanced
  assert context_parallel.split(mesh, q, k, causal=False) is not None  # cross-attention: both split.
  assert context_parallel.split(mesh, q[:, :1], k, causal=True) is None  # a decode step runs whole.
  assert context_parallel.split(mesh, q[:, :12], q[:, :12], causal=True).balanced is False  # 12 % 8: unbalanced.
  assert context_parallel.split(mesh, q, k[:, :6], causal=False) is None
  assert context_parallel.split(placement("ring", sequence=1), q, q, causal=True) is None
  assert context_parallel.split(None, q, q, causal=True) is None


def test_what_a_split_cannot_take_is_refused_in_one_line(scratch_registries):
  q, k, v, ids = problem()
  ring, gather = placement("ring"), placement("gather")
  bias = jnp.zeros((1, 4, 32, 32))
  with pytest.raises(ValueError, match=r"'chunked' cannot run over a sequence split across 4 devices .*\['bias'\]"):
    attention.get("chunked").fn(q, k, v, bias=bias, mesh=gather)
  with pytest.raises(ValueError, match=r"'dot_product' .*\['dropout'\]"):
    attention.get("dot_product").fn(q, k, v, dropout_rate=0.1, dropout_rng=jax.random.PRNGKey(0), mesh=ring)
  with pytest.raises(ValueError, match="'linear' is not softmax attention.*context_strategy='gather'"):
    attention.get("linear").fn(q, k, v, causal=True, mesh=ring)

  @register("by_index", supports={"causal", "segment_ids"}, weights=softmax_weights)
  def by_index(query, key, value, **masking):
    return attention.get("dot_product").fn(query, key, value, **masking)

  with pytest.raises(ValueError, match="'by_index' masks by index, so it cannot take a share of a causal"):
    attention.get("by_index").fn(q, k, v, causal=True, mesh=gather)
  assert REGISTRY.get("by_index").splits_sequence is False
  with pytest.raises(ValueError, match="'own_split': splits_sequence=True .* needs a `mesh` keyword argument"):
    register("own_split", supports={"causal"}, weights=softmax_weights, splits_sequence=True)(by_index)
  # A flex function reads absolute positions (q_idx, kv_idx), which a share does not hold: refused, not run wrong.
  flex.register("within_4", mask_mod=lambda b, h, q_idx, kv_idx: jnp.abs(q_idx - kv_idx) < 4)
  with pytest.raises(ValueError, match="'within_4' reads captured tensors or absolute positions.*sequence=1"):
    attention.get("within_4").fn(q, k, v, mesh=gather)
  # Without positions in its masks, gathered keys and values need none: the same kernel takes its share.
  out = jax.jit(functools.partial(attention.get("by_index").fn, mesh=gather))(q, k, v)
  np.testing.assert_allclose(out, attention.get("dot_product").fn(q, k, v), atol=1e-6)


@pytest.mark.slow  # ~20 s: splash's kernels run in the Pallas interpreter.
@pytest.mark.parametrize("window", [None, (40, 0)])
def test_splash_takes_its_share_of_the_queries_inside_shard_map(window):
  """splash (interpreted) on data 2 x sequence 2 x tensor 2: its mask split by query blocks in the balanced
  order, grouped key/value heads repeated to follow their query heads; one device's outputs and gradients."""
  args = problem(length=256, heads=2, kv_heads=1)
  masking = dict(causal=True, window=window)
  want_out, want_grads = jax.jit(output_and_grads("dot_product", {}, masking))(*args)
  mesh = placement("gather", data=2, sequence=2, tensor=2)
  out, grads = jax.jit(output_and_grads("splash", dict(block_q=128, block_kv=128), masking, mesh),
                       in_shardings=shardings(mesh.mesh, kv_heads=1))(*args)
  rows = np.asarray(args[3] != 0)
  np.testing.assert_allclose(np.asarray(out)[rows], np.asarray(want_out)[rows], atol=2e-6)
  for got, want in zip(grads, want_grads, strict=True):
    np.testing.assert_allclose(got, want, atol=2e-5)


@pytest.mark.integration  # two small models trained one step each (~1 min of compiling on 2 cores).
@pytest.mark.parametrize("strategy", axes.CONTEXT_STRATEGIES)
def test_train_step_with_a_sequence_axis_equals_one_device(strategy, monkeypatch):
  """The encoder-decoder model (encoder, causal decoder and cross-attention) trained two steps on data 2 x
  sequence 4, every attention split: one device's loss, parameters and evaluation sums; rows that do not split are
  refused."""
  splits = []
  attend = context_parallel.attend
  monkeypatch.setattr(context_parallel, "attend", lambda name, how, *a, **k: splits.append(how) or attend(
      name, how, *a, **k))
  results = {}
  for layout in ("one_device", "data2_sequence4"):
    runner = make_parallel_runner(layout, **{"parallel.context_strategy": strategy})
    state = runner.init_state(jax.random.PRNGKey(0))
    for seed in range(2):
      state, metrics = runner.train_step(state, parallel_batch(seed))
    results[layout] = metrics["loss"], jax.device_get(state.params), runner.eval_step(state.params, parallel_batch(5))
  assert runner.batch_sharding.spec == PartitionSpec(("data", "fsdp"), "sequence")
  # The train step's three attentions (traced once for its first call) ran split, the causal one balanced.
  assert {(how.size, how.balanced, how.ring) for how in splits} == {(4, False, strategy == "ring"),
                                                                    (4, True, strategy == "ring")}
  np.testing.assert_allclose(results["data2_sequence4"][0], results["one_device"][0], atol=1e-5)
  for got, want in zip(jax.tree.leaves(results["data2_sequence4"][1]), jax.tree.leaves(results["one_device"][1]),
                       strict=True):
    np.testing.assert_allclose(got, want, atol=1e-5)
  evaluated, want = results["data2_sequence4"][2], results["one_device"][2]
  assert evaluated["tokens"] == want["tokens"] and evaluated["correct"] == want["correct"]
  np.testing.assert_allclose(evaluated["nll_sum"], want["nll_sum"], rtol=1e-6)
  with pytest.raises(ValueError, match="rows of 18 tokens are not divisible by parallel.sequence = 4"):
    runner.shard_batch({k: np.zeros((16, 18), np.int32) for k in ("inputs", "targets")})


@pytest.mark.integration  # a model trained from the command line (~1 min of compiling on 2 cores).
@pytest.mark.parametrize("strategy", axes.CONTEXT_STRATEGIES)
def test_long_context_config_trains_from_the_cli_on_a_sequence_axis(strategy, text_corpus, tmp_path, capsys):
  """configs/lm_long.py (shrunk: rows of 64 tokens, not 16,384) trains 3 steps on the 8 devices' sequence axis,
  each holding 8 tokens of every row, and reports its test bits per byte."""
  from jformer import config as config_lib
  from jformer import main

  config_file = REPO / "configs" / "lm_long.py"
  small = {"data.path": text_corpus, "data.data_dir": text_corpus.parent / "tfds", "data.max_length": 64,
           "model.vocab_size": 400, "model.d_model": 32, "model.d_ff": 64, "model.max_length": 64,
           "optimizer.warmup_steps": 10, "train.steps": 3, "train.log_every": 1, "train.eval_every": 3,
           "train.checkpoint_every": 3, "train.eval_lengths": "(64,)", "parallel.context_strategy": strategy}
  main.main(["train", f"--config={config_file}", f"--workdir={tmp_path / 'run'}",
             *(f"--config.{key}={value}" for key, value in small.items())])
  out = capsys.readouterr().out
  assert "mesh (data=1, fsdp=1, sequence=8, tensor=1) over 8 cpu devices" in out, out[-2000:]
  assert "step      3/3 |" in out and "test bits per byte" in out, out[-2000:]
  config = config_lib.load(config_file)  # the shipped config itself, unshrunk.
  assert config.data.max_length == config.model.max_length == 16_384 and config.parallel.sequence == -1
