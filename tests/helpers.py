"""Helpers shared by several test modules (not a test module: no test imports another; conftest.py holds fixtures).

`tests/` is on `sys.path` (pytest inserts the folder of the rootdir's conftest.py, tests/reliability/ included), so
test modules write `from helpers import ...` / `import helpers`. Grouped by what they serve: the tiny configs and
corpus overrides; small models of tests/test_models.py; the attention-variant matrix (tests/test_attention_variants.py,
also run on plug-ins and kernels); toy decoding models; the mesh/runner configs of tests/test_parallel.py; runs,
checkpoints and multi-process jobs of the integration tests; the one-line errors of the command (tests/reliability/).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import socket
import signal
import subprocess
import sys
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import portpicker
import pytest
import xla_flags

from jformer import attention, checkpoint, data, positional, tasks
from jformer import config as config_lib
from jformer.attention import flex
from jformer.decode.translator import init_cache
from jformer.ops import masks
from jformer.train import optim
from jformer.train.runner import make_runner

REPO = pathlib.Path(__file__).resolve().parents[1]
SMALL = REPO / "configs" / "small.py"


# ---------------------------------------------------------------------------------------------- config overrides


def import_benchmark(name: str):
  """The module of the script benchmarks/<name>.py (imported with benchmarks/ on sys.path, which is left as it was)."""
  import importlib

  sys.path.insert(0, str(REPO / "benchmarks"))
  try:
    return importlib.import_module(name)
  finally:
    sys.path.remove(str(REPO / "benchmarks"))


def tiny_overrides(corpus: pathlib.Path, **extra) -> dict:
  """Config overrides for a model that trains in seconds on `tiny_corpus`."""
  overrides = {
      "data.path": str(corpus), "data.max_length": 32, "data.batch_size": 8, "data.eval_batch_size": 8,
      "model.vocab_size": 300, "model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64,
      "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, "model.max_length": 64,
      "optimizer.warmup_steps": 10, "train.steps": 6, "train.log_every": 2, "train.eval_every": 3,
      "train.checkpoint_every": 3, "decode.method": "greedy", "decode.max_extra_length": 5,
  }
  overrides.update(extra)
  return overrides


def positional_overrides(name: str) -> dict:
  """Config overrides selecting positional encoding `name` with its `example_options` (for small test models)."""
  return {"model.positional": name, **{f"model.positional_options.{option}": value
                                       for option, value in positional.get(name).example_options.items()}}


def load_tiny(corpus: pathlib.Path, **extra):
  """configs/small.py under `tiny_overrides(corpus, **extra)`."""
  return config_lib.load(SMALL, tiny_overrides(corpus, **extra))


# ---------------------------------------------------------------------------------------------- command-line errors


def run_cli(argv, capsys):
  """(exit status, stderr) of `jformer argv` run in this process, as the interpreter reports a SystemExit (a string:
  printed on stderr, status 1)."""
  from jformer import main

  capsys.readouterr()
  try:
    status = main.main([str(arg) for arg in argv])
  except SystemExit as stop:
    status = stop.code
  err = capsys.readouterr().err
  if isinstance(status, str):
    err, status = err + status + "\n", 1
  return status or 0, err


def run_command(args, *, env=None, timeout=600, **popen) -> subprocess.CompletedProcess:
  """`python -m jformer.main *args` run as a process from the project root (text output captured); `env`: variables
  added to this process's environment."""
  return subprocess.run([sys.executable, "-m", "jformer.main", *map(str, args)], cwd=popen.pop("cwd", REPO),
                        env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout, **popen)


def assert_one_line_error(status, err, *fragments, expected_status=1):
  """`err` is one line without a traceback holding every fragment, and `status` is `expected_status`."""
  assert status == expected_status, err
  lines = err.strip().splitlines()
  assert len(lines) == 1 and "Traceback" not in err, err
  for fragment in fragments:
    assert fragment in lines[0], lines[0]


# ---------------------------------------------------------------------------------------------- small models


def tiny(**overrides):
  """A 2+2-layer Transformer of d_model 32 (4 heads, vocabulary 50, dropout 0.1) under `overrides`."""
  base = {"model.vocab_size": 50, "model.d_model": 32, "model.num_heads": 4, "model.d_ff": 64,
          "model.num_encoder_layers": 2, "model.num_decoder_layers": 2, "model.max_length": 32,
          "data.max_length": 32, "model.dropout_rate": 0.1}
  base.update(overrides)
  return tasks.build_model(config_lib.load(SMALL, base))


FIXED_TOKENS = jnp.ones((1, 2), jnp.int32)


def init(model, inputs, targets, seed=0):
  """`model.init` for these inputs, unboxed. The values do not depend on the inputs' shapes, so they are computed for
  one fixed shape (whose ops JAX's eager per-op cache holds after the first call, where a new shape costs seconds of
  compiling) once `jax.eval_shape` has checked these inputs (e.g. refused a sequence longer than max_length)."""
  key = jax.random.PRNGKey(seed)
  jax.eval_shape(model.init, key, inputs, targets)
  return nn.meta.unbox(model.init(key, FIXED_TOKENS, FIXED_TOKENS))


def tokens(seed, shape, vocab=50):
  return jax.random.randint(jax.random.PRNGKey(seed), shape, 1, vocab)


def decode_step_by_step(model, params, encoded, inputs, targets, encoded_at_steps=None, jit=False):
  """Logits `[B, T, V]` of `targets` fed one token per cached decode step (`encoded_at_steps`: the encoder
  output given to the steps, default `encoded`; the cache is built from `encoded`). `jit=True` compiles the step
  once for all steps (cheaper than running eagerly a model whose attention loops over blocks)."""
  make_cache = functools.partial(init_cache, model, max_decode_len=targets.shape[1])
  cache = (jax.jit(make_cache) if jit else make_cache)(params, encoded, inputs)
  previous = jnp.pad(targets, ((0, 0), (1, 0)))[:, :-1]
  step = functools.partial(model.apply, decode=True, method=model.decode, mutable=["cache"])
  step = jax.jit(step) if jit else step
  steps = []
  given = encoded if encoded_at_steps is None else encoded_at_steps
  for t in range(targets.shape[1]):
    logits, mutated = step({"params": params, "cache": cache}, given, inputs, previous[:, t:t + 1])
    cache = mutated["cache"]
    steps.append(logits)
  return jnp.concatenate(steps, axis=1)


def check_packed_rows_equal_separate_examples(model):
  """A translation `model` on a row of two packed pairs (and padding) gives each pair's logits alone."""
  xa, ya, xb, yb = tokens(0, (1, 3)), tokens(1, (1, 4)), tokens(2, (1, 4)), tokens(3, (1, 2))
  params = init(model, xa, ya)
  apply = jax.jit(model.apply)  # three shapes, each used once: compiling beats running new shapes eagerly.
  packed = apply(
      params, jnp.concatenate([xa, xb, jnp.zeros((1, 1), jnp.int32)], 1), jnp.concatenate([ya, yb], 1),
      inputs_segmentation=jnp.array([[1, 1, 1, 2, 2, 2, 2, 0]]), targets_segmentation=jnp.array([[1] * 4 + [2] * 2]),
      inputs_positions=jnp.array([[0, 1, 2, 0, 1, 2, 3, 0]]), targets_positions=jnp.array([[0, 1, 2, 3, 0, 1]]))
  np.testing.assert_allclose(packed[:, :4], apply(params, xa, ya), atol=1e-5)
  np.testing.assert_allclose(packed[:, 4:], apply(params, xb, yb), atol=1e-5)


# ---------------------------------------------------------------------------------------------- attention matrix
# Every registered attention variant against its reference, forward and gradients, in every setting the model uses
# (tests/test_attention_variants.py runs it over the registry; tests/test_plugins.py on a plug-in variant).

BATCH, LENGTH, SOURCE_LENGTH, HEADS, DIM = 2, 9, 7, 2, 8
PADDING = jnp.array([[1] * 6 + [0] * 3, [1] * 9])  # row 0: 6 tokens + padding
SOURCE_PADDING = jnp.array([[1] * 7, [1] * 4 + [0] * 3])
PACKED = jnp.array([[1, 1, 1, 2, 2, 2, 2, 3, 0], [1, 1, 1, 1, 1, 2, 2, 0, 0]])  # packed examples per row
PACKED_POSITIONS = jnp.array([[0, 1, 2, 0, 1, 2, 3, 0, 0], [0, 1, 2, 3, 4, 0, 1, 0, 0]])
PACKED_SOURCE = jnp.array([[1, 1, 2, 2, 2, 3, 3], [1, 1, 1, 2, 0, 0, 0]])


def random_qkv(seed: int, q_len=LENGTH, kv_len=LENGTH, heads=HEADS, kv_heads=HEADS):
  kq, kk, kv = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(kq, (BATCH, q_len, heads, DIM)), jax.random.normal(kk, (BATCH, kv_len, kv_heads, DIM)),
          jax.random.normal(kv, (BATCH, kv_len, kv_heads, DIM)))


@dataclasses.dataclass(frozen=True)
class Setting:
  """A way the model calls attention: the features it needs and its inputs (query, key, value, keyword args)."""
  needs: frozenset
  make: Callable[[], tuple]


SETTINGS = {
    "encoder_padding": Setting(frozenset({"segment_ids"}), lambda: (
        *random_qkv(0), dict(q_segment_ids=PADDING, kv_segment_ids=PADDING))),
    "decoder_causal": Setting(frozenset({"causal", "segment_ids"}), lambda: (
        *random_qkv(2), dict(causal=True, q_segment_ids=PADDING, kv_segment_ids=PADDING))),
    "cross_attention": Setting(frozenset({"segment_ids"}), lambda: (
        *random_qkv(3, kv_len=SOURCE_LENGTH), dict(q_segment_ids=PADDING, kv_segment_ids=SOURCE_PADDING))),
    "packed_encoder": Setting(frozenset({"segment_ids", "positions"}), lambda: (
        *random_qkv(5), dict(q_segment_ids=PACKED, kv_segment_ids=PACKED, q_positions=PACKED_POSITIONS,
                             kv_positions=PACKED_POSITIONS))),
    "packed_cross_attention": Setting(frozenset({"segment_ids"}), lambda: (
        *random_qkv(6, kv_len=SOURCE_LENGTH), dict(q_segment_ids=PACKED, kv_segment_ids=PACKED_SOURCE))),
    "grouped_query": Setting(frozenset({"causal", "gqa"}), lambda: (*random_qkv(7, heads=4, kv_heads=2),
                                                                    dict(causal=True))),
    "packed_decoder_multi_query": Setting(frozenset({"causal", "segment_ids", "positions", "gqa"}), lambda: (
        *random_qkv(8, heads=4, kv_heads=1), dict(causal=True, q_segment_ids=PACKED, kv_segment_ids=PACKED,
                                                  q_positions=PACKED_POSITIONS, kv_positions=PACKED_POSITIONS))),
    "bias": Setting(frozenset({"bias", "segment_ids"}), lambda: (
        *random_qkv(9), dict(q_segment_ids=PADDING, kv_segment_ids=PADDING,
                             bias=jax.random.normal(jax.random.PRNGKey(19), (1, HEADS, LENGTH, LENGTH))))),
    "bias_per_key_causal": Setting(frozenset({"bias", "causal"}), lambda: (
        *random_qkv(10), dict(causal=True, bias=jax.random.normal(jax.random.PRNGKey(20), (BATCH, 1, 1, LENGTH))))),
    "mask": Setting(frozenset({"mask"}), lambda: (*random_qkv(11, kv_len=SOURCE_LENGTH), dict(
        mask=jax.random.bernoulli(jax.random.PRNGKey(21), 0.6, (BATCH, 1, LENGTH, SOURCE_LENGTH))
        | (jnp.arange(SOURCE_LENGTH) == 0)))),
    # Logits of std ~ 3 (queries x 3) against a cap of 2: most of them in tanh's bend, some saturated.
    "softcap_decoder": Setting(frozenset({"softcap", "causal", "segment_ids"}), lambda: (
        *((3.0 * x if i == 0 else x) for i, x in enumerate(random_qkv(15))),
        dict(causal=True, q_segment_ids=PADDING, kv_segment_ids=PADDING, logits_softcap=2.0))),
    # A sliding window: two keys back and one ahead (asymmetric, so left and right cannot be swapped unseen);
    # with causal masking the right side is cut (3 ahead would otherwise show).
    "window_encoder": Setting(frozenset({"window", "segment_ids"}), lambda: (
        *random_qkv(16), dict(q_segment_ids=PADDING, kv_segment_ids=PADDING, window=(2, 1)))),
    "window_decoder": Setting(frozenset({"window", "causal", "segment_ids"}), lambda: (
        *random_qkv(17), dict(causal=True, q_segment_ids=PADDING, kv_segment_ids=PADDING, window=(2, 3)))),
}


CROSS = ("cross_attention", "packed_cross_attention", "mask")  # the settings whose keys are not the queries (S != T).


def representative_settings(supports) -> list[str]:
  """The matrix settings the default test run checks a variant that declares `supports` in (the slow run checks
  all): the fewest, most demanding ones that together ask for every feature it declares (greedily: most features not
  yet asked for, then most features), and one with S != T. E.g. packed_decoder_multi_query, bias and mask for a
  variant that declares everything; the rest of the matrix combines the same features in fewer ways."""
  supported = [name for name in sorted(SETTINGS) if SETTINGS[name].needs <= supports]
  chosen, asked = [], set()
  while True:
    gain = lambda name: (len(SETTINGS[name].needs - asked), len(SETTINGS[name].needs))
    best = max((name for name in supported if name not in chosen), key=gain, default=None)
    if best is None or not SETTINGS[best].needs - asked:
      break
    chosen.append(best)
    asked |= SETTINGS[best].needs
  if not set(chosen) & set(CROSS):
    chosen += [name for name in CROSS if name in supported][:1]
  return chosen


def options_of(name):
  """The variant's example options (they cut these small shapes into several blocks that do not divide the
  lengths)."""
  return dict(attention.get(name).example_options)


def params_of(name, heads, q_len=LENGTH, kv_len=LENGTH):
  """Random (not initial: e.g. `general` starts as the identity) values for the variant's declared parameters,
  shaped for `heads` query heads, and for its declared captures (per query head, at `q_len` queries and `kv_len`
  keys): the keyword arguments `params=` and `captures=` of a call."""
  variant = attention.get(name)
  extra = {}
  if variant.params:
    dims = dict(heads=heads, kv_heads=heads, head_dim=DIM, d_model=heads * DIM)
    shapes = variant.param_shapes(dims, variant.example_options)
    keys = jax.random.split(jax.random.PRNGKey(23), len(shapes))
    extra["params"] = {n: 0.5 * jax.random.normal(key, shapes[n]) for key, n in zip(keys, sorted(shapes))}
  if variant.captures:
    # One value per head; a capture read at the queries only (an output gate) one per head and value feature.
    draw = lambda seed, length, side: {
        n: jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(seed), i),
                             (BATCH, length, heads) + (DIM,) * variant.captures[n].queries_only)
        for i, n in enumerate(sorted(variant.captures)) if side == "q" or not variant.captures[n].queries_only}
    extra["captures"] = {"q": draw(24, q_len, "q"), "kv": draw(25, kv_len, "kv")}
  return extra


def visible_rows(q, k, kwargs, name=None):
  """`[B, T]` bool: the queries that see at least one key (others have no defined output); for a flex variant
  `name`, with its mask_mod (`flex.visible_keys`)."""
  variant = None if name is None else attention.get(name)
  if variant is not None and flex.is_flex(variant):
    mask = flex.visible_keys(variant, q, k, **kwargs, **variant.example_options)
  else:
    masking = {n: x for n, x in kwargs.items() if n not in ("bias", "params", "captures", "logits_softcap")}
    mask = masks.attention_mask(q.shape[1], k.shape[1], **masking)
  if mask is None:
    return np.ones(q.shape[:2], bool)
  return np.broadcast_to(np.asarray(mask).any((1, 3)), q.shape[:2])


def output_and_grads(fn, q, k, v, kwargs, rows, jit=True):
  """`fn`'s output and the gradients of sum(out * cotangent) over the visible rows wrt q, k, v (and bias, and the
  variant's parameters and captured values); `jit=False` runs them eagerly (for a reference formula, run once:
  cheaper than compiling it, once JAX's per-op cache holds these shapes)."""
  cotangent = jax.random.normal(jax.random.PRNGKey(99), q.shape[:3] + v.shape[-1:]) * rows[:, :, None, None]
  names = [n for n in DIFFERENTIABLE if n in kwargs]
  differentiable = (q, k, v) + tuple(kwargs[n] for n in names)

  def loss(q, k, v, *extra):
    out = fn(q, k, v, **dict(kwargs, **dict(zip(names, extra))))
    return jnp.sum(jnp.where(rows[:, :, None, None], out, 0.0) * cotangent), out

  grad_fn = jax.value_and_grad(loss, argnums=tuple(range(len(differentiable))), has_aux=True)
  (_, out), grads = (jax.jit(grad_fn) if jit else grad_fn)(*differentiable)
  return np.asarray(out), grads


# The keyword arguments of a variant call that get gradients, besides query, key and value.
DIFFERENTIABLE = ("bias", "params", "captures")


def assert_grads_close(grads, want_grads, names):
  for argument, got, want in zip(names, grads, want_grads):
    (got_leaves, _), want_leaves = jax.tree_util.tree_flatten_with_path(got), jax.tree.leaves(want)
    for (path, g), w in zip(got_leaves, want_leaves, strict=True):
      np.testing.assert_allclose(g, w, atol=1e-5, err_msg=f"gradient wrt {argument}{jax.tree_util.keystr(path)}")


def assert_equals_formula(fn, formula, args, cotangent, names):
  """`fn(*args)` and its gradients wrt every argument equal `formula`'s (fn jitted, the formula written out in the
  test run eagerly), through the loss sum(out * cotangent); returns fn's gradients. `names`: the arguments'."""
  loss = lambda f: lambda *a: jnp.sum(f(*a) * cotangent)
  got, got_grads = jax.jit(jax.value_and_grad(loss(fn), argnums=range(len(args))))(*args)
  want, want_grads = jax.value_and_grad(loss(formula), argnums=range(len(args)))(*args)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert_grads_close(got_grads, want_grads, names)
  return got_grads


def skip_unless_runs_here(variant):
  """A kernel built for other backends runs here only if it has a Pallas interpreter (an `interpret` option)."""
  backend = jax.default_backend()
  if variant.platforms is not None and backend not in variant.platforms and "interpret" not in variant.options:
    pytest.skip(f"'{variant.name}' runs only on {sorted(variant.platforms)}, not on {backend}")


def check_variant_matches_reference(name, setting):
  """Variant `name` in matrix setting `setting`: its output and gradients equal its reference's (skipped when it
  does not declare the setting's features, does not run on this backend, or its `limits` refuse the call)."""
  variant, case = attention.get(name), SETTINGS[setting]
  if not case.needs <= variant.supports:
    pytest.skip(f"'{name}' does not declare {sorted(case.needs - variant.supports)}")
  skip_unless_runs_here(variant)
  q, k, v, kwargs = case.make()
  refusal = variant.refusal(q, k, v, **kwargs)
  if refusal:  # its `limits` (tests/test_attention_kernels.py checks which settings each kernel takes).
    pytest.skip(f"'{name}' refuses this call: {refusal}")
  kwargs = dict(kwargs, **params_of(name, q.shape[2], q.shape[1], k.shape[1]))
  rows = visible_rows(q, k, kwargs, name)
  options = options_of(name)
  out, grads = output_and_grads(functools.partial(variant.fn, **options), q, k, v, kwargs, rows)
  want_out, want_grads = output_and_grads(functools.partial(variant.reference, **options), q, k, v, kwargs, rows,
                                          jit=False)
  assert out.shape == q.shape and np.isfinite(out).all()
  np.testing.assert_allclose(out[rows], want_out[rows], atol=1e-5)
  assert_grads_close(grads, want_grads, ("query", "key", "value") + tuple(n for n in DIFFERENTIABLE if n in kwargs))


def check_decode_steps_match_full_forward(name):
  """Step t: one query at position t against a cache of S slots, slots after t holding garbage (K < H heads)."""
  variant = attention.get(name)
  if not {"causal", "positions", "decode"} <= variant.supports:
    pytest.skip(f"'{name}' does not declare decode")
  skip_unless_runs_here(variant)
  slots = 6
  q, k, v = random_qkv(12, q_len=slots, kv_len=slots, heads=4, kv_heads=2)
  garbage = 100.0 * jax.random.normal(jax.random.PRNGKey(13), k.shape)
  extra = dict(options_of(name), **params_of(name, q.shape[2], slots, slots))
  fn = functools.partial(variant.fn, **extra)
  filled = lambda x, t: jnp.where((jnp.arange(slots) <= t)[None, :, None, None], x, garbage)
  # Captured values: the step's own at the query, every slot's at the keys (as the cache keeps them).
  captured_at = lambda t: {} if "captures" not in extra else {"captures": dict(extra["captures"], q={
      n: jax.lax.dynamic_slice_in_dim(x, t, 1, axis=1) for n, x in extra["captures"]["q"].items()})}

  def decode(q, k, v):
    def step(t):  # one compiled step for all t
      return fn(jax.lax.dynamic_slice_in_dim(q, t, 1, axis=1), filled(k, t), filled(v, t), causal=True,
                q_positions=jnp.full((BATCH, 1), t), kv_positions=jnp.arange(slots)[None], **captured_at(t))[:, 0]

    return jnp.moveaxis(jax.lax.map(step, jnp.arange(slots)), 0, 1)

  rows = np.ones((BATCH, slots), bool)
  out, grads = output_and_grads(decode, q, k, v, {}, rows)
  want_out, want_grads = output_and_grads(functools.partial(variant.reference, **extra), q, k, v, dict(causal=True),
                                          rows, jit=False)
  np.testing.assert_allclose(out, want_out, atol=1e-5)
  assert_grads_close(grads, want_grads, ("query", "key", "value"))


def check_undeclared_features_are_refused(name):
  """`check` refuses what a variant does not declare, and so does a call that asks for it."""
  variant = attention.get(name)
  undeclared = [s for s in SETTINGS.values() if not s.needs <= variant.supports]
  for case in undeclared:
    with pytest.raises(ValueError, match=f"attention variant '{name}' does not support"):
      variant.check(needs=case.needs)
    q, k, v, kwargs = case.make()
    with pytest.raises(ValueError, match=f"attention variant '{name}' does not support"):
      variant.fn(q, k, v, **kwargs, **options_of(name), **params_of(name, q.shape[2], q.shape[1], k.shape[1]))
  if "dropout" not in variant.supports:
    with pytest.raises(ValueError, match=r"does not support \['dropout'\]"):
      variant.fn(*random_qkv(0), dropout_rate=0.1, dropout_rng=jax.random.PRNGKey(0), **options_of(name),
                 **params_of(name, HEADS))
  assert variant.supports <= set(attention.FEATURES)


# A plug-in attention variant from outside the package (tests/plugins/), loaded by conftest's `plugin_registry`.
PLUGIN = REPO / "tests" / "plugins" / "learned_temperature.py"
PLUGIN_NAME = "learned_temperature"
# Flex variants from outside the package (loaded by conftest's `flex_plugins`): two from papers, and today's
# features re-expressed with today's implementations as their references (tests/test_attention_flex.py).
FLEX_PLUGINS = tuple(REPO / "tests" / "plugins" / f for f in ("learned_alibi.py", "forgetting_transformer.py",
                                                               "flex_reexpressed.py"))


# ---------------------------------------------------------------------------------------------- toy decoders

EOS = 1  # the decoders' end-of-sequence id (jformer.ops.tokens.EOS_ID).


def log_softmax(x):
  x = np.asarray(x, np.float64)
  x = x - x.max()
  return x - np.log(np.exp(x).sum())


class StepModel:
  """A decoder step of logits from a fixed random table indexed by row, step (a scalar in the cache) and previous
  token (tests/test_decode_search.py).

  EOS has logit -20 (never among the two best) except in a few table entries where it has +20 (the certain best).
  """

  def __init__(self, seed, batch, vocab, max_len, eos_rate=0.15):
    rng = np.random.default_rng(seed)
    self.batch, self.vocab, self.max_len = batch, vocab, max_len
    table = rng.normal(size=(batch, max_len, vocab, vocab)) * 1.5
    table[..., EOS] = self.eos_logits(table[..., EOS], rng.random(table.shape[:-1]) < eos_rate)
    self.table = table

  def eos_logits(self, drawn, boosted):
    """EOS logits of the table from the drawn ones and where EOS is boosted: +-20 here."""
    del drawn
    return np.where(boosted, 20.0, -20.0)

  def init_cache(self):
    return {"row": jnp.arange(self.batch, dtype=jnp.int32), "index": jnp.int32(0)}

  def step(self, ids, cache):
    logits = jnp.asarray(self.table, jnp.float32)[cache["row"], cache["index"], ids[:, 0]]
    return logits, {"row": cache["row"], "index": cache["index"] + 1}

  def np_greedy(self, b, limit=None):
    seq, prev, logp = [], 0, 0.0
    while len(seq) < self.max_len:
      lps = log_softmax(self.table[b, len(seq), prev])
      t = EOS if limit is not None and len(seq) + 1 >= limit else int(np.argmax(lps))
      seq.append(t)
      logp += lps[t]
      prev = t
      if t == EOS:
        break
    return tuple(seq), logp


class SamplingStepModel(StepModel):
  """The search tests' table model with softer EOS logits: drawn + 6 where boosted, drawn - 3 elsewhere
  (tests/test_decode_sampling.py)."""

  def __init__(self, seed, batch, vocab, max_len, eos_rate=0.1):
    super().__init__(seed, batch, vocab, max_len, eos_rate)

  def eos_logits(self, drawn, boosted):
    return drawn + np.where(boosted, 6.0, -3.0)


# ---------------------------------------------------------------------------------------------- meshes and runners
# tests/test_parallel.py, tests/test_attention_sharded.py, and the processes of the multi-host test.

LAYOUTS = {
    "one_device": {"parallel.data": 1, "parallel.fsdp": 1, "parallel.tensor": 1},
    "data8": {"parallel.data": 8},
    "data2_fsdp2_tensor2": {"parallel.data": 2, "parallel.fsdp": 2, "parallel.tensor": 2},
    "fsdp4_tensor2": {"parallel.data": 1, "parallel.fsdp": 4, "parallel.tensor": 2},
    "data2_sequence4": {"parallel.data": 2, "parallel.sequence": 4},
    "pmap8": {"parallel.mode": "pmap"},
}


def parallel_config(**overrides):
  """A 1+1-layer model of d_model 32 on rows of 16 tokens, for one train step under each wrapper and mesh."""
  # Adam's first updates are lr * g / (|g| + eps): with the paper's eps=1e-9 a near-zero gradient element turns
  # reduction-order noise (1e-7 of gradients of size 1-10, e.g. tensor-parallel sums of the fused Q/K/V
  # projection) into a large part of a +-lr step. eps=1e-4 keeps the comparison about the parallelism.
  base = {"model.vocab_size": 64, "model.d_model": 32, "model.num_heads": 4, "model.d_ff": 64,
          "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, "model.max_length": 16,
          "model.dropout_rate": 0.0, "data.max_length": 16, "optimizer.warmup_steps": 20, "optimizer.eps": 1e-4}
  base.update(overrides)
  return config_lib.load(SMALL, base)


def parallel_batch(seed=0, rows=16):
  rng = np.random.default_rng(seed)
  b = {k: rng.integers(1, 64, (rows, 16)).astype(np.int32) for k in ("inputs", "targets")}
  b["targets"][::3, 10:] = 0  # some padding.
  return b


def make_parallel_runner(layout, **overrides):
  """The runner (train/eval steps, state) of `parallel_config` under LAYOUTS[layout]."""
  config = parallel_config(**LAYOUTS[layout], **overrides)
  model = tasks.build_model(config)
  tx, schedule = optim.build_optimizer(config.optimizer, config.model.d_model)
  example = {k: np.zeros((1, 16), np.int32) for k in ("inputs", "targets")}
  return make_runner(config_lib.run_settings(config), model, tx, schedule, example)


# ---------------------------------------------------------------------------------------------- runs and processes


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def final_params(workdir):
  """(latest step, its params) of the run in `workdir`."""
  with checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), read_only=True) as ckpt:
    return ckpt.latest_step(), ckpt.restore_params()


def assert_same_params(a, b, atol):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(x, y, atol=atol)


def direct_nats(apply, params, ids, max_length):
  """Summed NLL (nats) of document `ids` read in pieces of `max_length`, each on its own (the model puts BOS in
  front): log-softmax of the full logits of `apply` (a jitted `model.apply`), no eval step, no padding, no
  batching."""
  total = 0.0
  for start in range(0, len(ids), max_length):
    piece = np.asarray(ids[start:start + max_length])
    logits = apply({"params": params}, piece[None])
    log_probs = jax.nn.log_softmax(np.asarray(logits, np.float64)[0], axis=-1)
    total -= float(np.sum(log_probs[np.arange(len(piece)), piece]))
  return total


def untrained_run(workdir, corpus, architecture: str):
  """A run folder `jformer translate`/`generate` can read, built without training (model.architecture
  `architecture`: "transformer" or "lm"): config.json written as `jformer train` writes it, a SentencePiece
  vocabulary trained on the tiny corpus where the run keeps it, random parameters as the run's averaged checkpoint
  (what `--checkpoint=auto` reads first). Returns (model, params, tokenizer)."""
  config = config_lib.load(SMALL, {**tiny_overrides(corpus), "model.architecture": architecture})
  workdir.mkdir(parents=True)
  config_lib.write_run(config, workdir)
  texts = [line for name in ("train.src", "train.tgt") for line in (corpus / name).read_text().splitlines()]
  tokenizer = data.get_tokenizer(data.vocab_path(config, workdir), lambda: texts, vocab_size=config.model.vocab_size)
  model = tasks.build_model(config)
  ids = jnp.ones((1, 8), jnp.int32)
  args, kwargs = model.call_arguments({"inputs": ids, "targets": ids})
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), *args, **kwargs))["params"]
  checkpoint.save_params(checkpoint.averaged_dir(workdir), params)
  return model, params, tokenizer


def prepared_overrides(repo_root, corpus, tmp_path, **extra) -> list[str]:
  """Overrides of a tiny 2-process run reading data and vocabulary that one process prepared once, here, for every
  run of the test (preparation once per workdir has its own test: tests/test_multiprocess_input.py)."""
  config = load_tiny(corpus)
  prepared = tmp_path / "prepared"
  data.make_datasets(dataset=config.data.dataset, tokenizer=data.load_tokenizer(config, str(prepared)), batch_size=8,
                     max_length=config.data.max_length, **data.source_args(config, str(prepared)))
  settings = tiny_overrides(corpus, **{"data.data_dir": prepared / "tfds",
                                       "data.vocab_path": prepared / "vocab/spm_300.model", **extra})
  return [f"--config.{k}={v}" for k, v in settings.items()]


def start_two_processes(repo_root, workdir, overrides, *, config="configs/small.py"):
  """`jformer train --config=<config>` (relative to `repo_root`) as processes 0 and 1 of a 2-process job on
  localhost, one CPU device each."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env.update(XLA_FLAGS=xla_flags.with_devices(1), JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1",
             JFORMER_COORDINATOR_ADDRESS=f"localhost:{portpicker.pick_unused_port()}", JFORMER_NUM_PROCESSES="2")
  command = [sys.executable, "-m", "jformer.main", "train", f"--config={config}", f"--workdir={workdir}",
             *overrides]
  return [subprocess.Popen(command, cwd=repo_root, env={**env, "JFORMER_PROCESS_ID": str(i)}, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(2)]


def sigterm_process_1_at_step(processes, step: int = 10) -> tuple[str, str]:
  """Sends SIGTERM to process 1 once process 0 (which prints the progress lines) reports `step`; then (process 0's
  output, process 1's output), both having exited 0 (`finish`)."""
  seen = []
  for line in processes[0].stdout:
    seen.append(line)
    if line.startswith(f"step {step:>6}/"):
      processes[1].send_signal(signal.SIGTERM)
      break
  rest, other = finish(processes)
  return "".join(seen) + rest, other


def finish(processes, timeout=600) -> list[str]:
  """Both processes' output, once both exited 0 (a process still running after `timeout` s is killed)."""
  try:
    outputs = [p.communicate(timeout=timeout)[0] for p in processes]
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()
  assert all(p.returncode == 0 for p in processes), "\n\n".join(out[-3000:] for out in outputs)
  return outputs


# Counts, per process, the one-time preparations (tokenizer training, tfds builds), then runs the CLI.
COUNTING_CLI = """
import os, runpy, sys
from jformer.data import parallel_text, tokenizer

def counted(name, fn):
  def wrapper(*args, **kwargs):
    with open(os.environ["CALLS_LOG"], "a") as log:
      log.write(name + "\\n")
    return fn(*args, **kwargs)
  return wrapper

tokenizer.train_tokenizer = counted("train_tokenizer", tokenizer.train_tokenizer)
parallel_text.ParallelText._split_generators = counted("tfds_build", parallel_text.ParallelText._split_generators)
sys.argv[0] = "jformer"
runpy.run_module("jformer.main", run_name="__main__")
"""


def train_processes(workdir, corpus, tmp_path, processes: int, **overrides) -> list[subprocess.Popen]:
  """Starts `jformer train` (tiny config) as `processes` processes of one job on `workdir`, 1 CPU device each,
  each logging its one-time preparations to `tmp_path/calls_<processes>_<index>.txt` (COUNTING_CLI)."""
  port = free_port()
  args = ["train", f"--config={SMALL}", f"--workdir={workdir}"]
  args += [f"--config.{k}={v}" for k, v in tiny_overrides(corpus, **overrides).items()]
  procs = []
  for index in range(processes):
    env = dict(os.environ, XLA_FLAGS=xla_flags.with_devices(1), JAX_PLATFORMS="cpu",
               PYTHONPATH=str(REPO), CALLS_LOG=str(tmp_path / f"calls_{processes}_{index}.txt"))
    if processes > 1:
      env.update(JFORMER_COORDINATOR_ADDRESS=f"localhost:{port}", JFORMER_NUM_PROCESSES=str(processes),
                 JFORMER_PROCESS_ID=str(index))
    procs.append(subprocess.Popen([sys.executable, "-c", COUNTING_CLI, *args], cwd=REPO, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE))
  return procs


def finish_processes(procs) -> list[tuple[int, str, str]]:
  """(exit status, stdout, stderr) of each process (all killed when one does not end within 300 s)."""
  results = []
  for proc in procs:
    try:
      out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
      for p in procs:
        p.kill()
      raise
    results.append((proc.returncode, out, err))
  return results
