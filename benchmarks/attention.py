"""Attention variants: forward+backward time and compiled temporary memory against sequence length.

For each variant and length (128, 256, ..., `--max_length`, or `--lengths`): batch 1, 8 heads, head_dim 64, causal
self-attention, float32; one jitted step computes the loss sum(attention(q, k, v)) and its gradients wrt q, k, v
and the variant's learned parameters, if it declares any (made by `jformer.registry.init_params` for these
dimensions, d_model = heads x head_dim; the per-token tensors it captures, if any, from a random layer input, in
the step). Each variant runs with `AttentionVariant.runnable_options`: its
defaults, its `example_options` value for an option it requires, `--options` on top.

A name `VARIANT+alibi` runs VARIANT with ALiBi's bias (`ops.positional.alibi_bias`, the fixed slopes of --heads
heads, computed inside the step as the model's `alibi` encoding does): the hand-written path. Two flex variants
(`jformer.attention.flex`) are registered here for comparison with the hand-written ones (`BESIDE`, a column of
the table): `flex_alibi`, ALiBi as a score_mod (score - m_h |i - j|, the same slopes), beside `chunked+alibi`;
`flex_window`, `local`'s window as a mask_mod function (|i - j| < window_size, so the engine evaluates it on the
blocks it partly masks), beside `local`. Memory is the compiled
step's temporary buffers (`memory_analysis().temp_size_in_bytes`), read before running; a step that would need
more than `--max_temp_gib` is marked OOM and not run. Time is the median of `--reps` runs after one warm-up run
(compile excluded), each waited for with `block_until_ready` (the minimum is printed too: on a shared machine it
is the steadier figure). The first line names the machine (CPU model and SIMD flags, `common.announce`).

    python benchmarks/attention.py --max_length=8192 --variants=dot_product,chunked --json=attention.json
    python benchmarks/attention.py --lengths=2048 --variants=chunked,additive --reps=1
    python benchmarks/attention.py --options='{"chunked": {"key_chunk_size": 512}}'
    python benchmarks/attention.py --imports=tests/plugins/learned_alibi.py --variants=learned_alibi,chunked+alibi
    python benchmarks/attention.py --lengths=2048,8192 --variants=dot_product+alibi,chunked+alibi,flex_alibi,local,\
        flex_window --options='{"local": {"window_size": 128}, "flex_window": {"window_size": 128}}'
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

import common
import jax
import jax.numpy as jnp

from jformer import attention, registry
from jformer import config as config_lib
from jformer.attention import flex
from jformer.ops.positional import alibi_bias, alibi_slopes

REFERENCE = "dot_product"
MIB = 2**20
# The hand-written path each flex variant of this script is timed beside.
BESIDE = {"flex_alibi": "chunked+alibi", "flex_window": "local"}
# What a name may add to its variant after a "+".
EXTRAS = ("alibi",)


def register_flex_variants(heads: int) -> None:
  """`flex_alibi` (ALiBi's fixed slopes of `heads` heads) and `flex_window` (module doc)."""
  slopes = jnp.asarray(alibi_slopes(heads))

  def alibi(score, b, h, q_idx, kv_idx):
    """ALiBi as a score_mod: the logits minus m_h |i - j| (fixed slopes)."""
    return score - slopes[h] * jnp.abs(q_idx - kv_idx)

  def window(b, h, q_idx, kv_idx, *, window_size: int = 256):
    """`local`'s window as a mask_mod function: |i - j| < window_size."""
    return jnp.abs(q_idx - kv_idx) < window_size

  flex.register("flex_alibi", score_mod=alibi)
  flex.register("flex_window", mask_mod=window)


def base_variant(name: str) -> str:
  """The registered variant a name runs ("chunked+alibi" -> "chunked")."""
  return name.partition("+")[0]


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--variants", default="", help="comma-separated registry names (default: every variant that "
                      "runs here, `runs_here`)")
  parser.add_argument("--max_length", type=int, default=16384, help="longest sequence (powers of two from 128)")
  parser.add_argument("--lengths", default="", help="comma-separated lengths instead of 128 ... --max_length")
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--heads", type=int, default=8)
  parser.add_argument("--head_dim", type=int, default=64)
  parser.add_argument("--reps", type=int, default=5, help="timed runs per point (median reported), >= 1")
  parser.add_argument("--max_temp_gib", type=float, default=16.0, help="skip (OOM) a point needing more")
  parser.add_argument("--options", default="{}", help='JSON {variant: {option: value}}, e.g. \'{"local": '
                      '{"window_size": 128}}\'')
  parser.add_argument("--json", default="", help="also write the rows to this JSON file")
  parser.add_argument("--imports", default="", help="plug-ins to load first, comma-separated files or modules, as "
                      "a config's imports (e.g. --imports=my_attention.py --variants=my_attention)")
  args = parser.parse_args(argv)
  if args.reps < 1:
    parser.error("--reps must be >= 1")
  try:
    config_lib.import_plugins(args.imports)  # the loader --config.imports uses.
  except (ValueError, FileNotFoundError) as e:
    parser.error(f"--imports: {e}")
  register_flex_variants(args.heads)
  args.variants = args.variants.split(",") if args.variants else [
      name for name in attention.available() if runs_here(name, args)]
  for name in args.variants:
    attention.get(base_variant(name))  # a KeyError naming the known variants
    if name.partition("+")[2] not in ("", *EXTRAS):
      parser.error(f"--variants: {name} adds '{name.partition('+')[2]}'; a name may add {EXTRAS} after a '+'")
  user_options = json.loads(args.options)
  unknown = sorted(set(user_options) - {base_variant(name) for name in args.variants})
  if unknown:
    parser.error(f"--options names variants not in --variants: {unknown}")
  try:
    args.options = {name: attention.get(base_variant(name)).runnable_options(user_options.get(base_variant(name)))
                    for name in args.variants}
  except ValueError as e:
    parser.error(f"--options: {e}")
  args.lengths = ([int(n) for n in args.lengths.split(",")] if args.lengths else
                  [2**p for p in range(7, 40) if 2**p <= args.max_length])
  return args


def runs_here(name: str, args) -> bool:
  """Whether a variant is built for this backend (a library kernel of another one is not: it would run in the Pallas
  interpreter, or not at all) and takes this benchmark's call (float32, causal; cuDNN e.g. takes half precision)."""
  variant = attention.get(name)
  probe = jax.ShapeDtypeStruct((args.batch, 128, args.heads, args.head_dim), jnp.float32)
  return ((variant.platforms is None or jax.default_backend() in variant.platforms)
          and variant.refusal(probe, probe, probe, causal=True) is None)


def learned_params(name: str, args) -> dict | None:
  """The variant's learned parameters for the benchmark's dimensions (float32, seed 0), or None if it has none."""
  variant = attention.get(base_variant(name))
  if not variant.params:
    return None
  dims = dict(heads=args.heads, kv_heads=args.heads, head_dim=args.head_dim, d_model=args.heads * args.head_dim)
  return registry.init_params(variant.params, variant.param_dims(dims, args.options[name]), jax.random.PRNGKey(1))


def captured(name: str, x_BxTxD, params) -> dict:
  """`captures=` of the variant's declared captures of the layer input `x` (self-attention: the same tokens at the
  queries and at the keys), as the model computes them (`jformer.models.captures`); {} if it declares none."""
  variant = attention.get(base_variant(name))
  if not variant.captures:
    return {}
  at = lambda keys: {n: c.values(x_BxTxD, params) for n, c in variant.captures.items() if not (keys and c.queries_only)}
  return {"captures": {"q": at(False), "kv": at(True)}}


def measure(name: str, length: int, args) -> dict:
  """One (variant, length) point: compile, read temporary memory, then time unless it would not fit."""
  kq, kk, kv = jax.random.split(jax.random.PRNGKey(0), 3)
  shape = (args.batch, length, args.heads, args.head_dim)
  q, k, v = (jax.random.normal(key, shape, jnp.float32) for key in (kq, kk, kv))
  fn = call_of(name, args)
  params = learned_params(name, args)
  if params is None:
    inputs, loss = (q, k, v), lambda q, k, v: jnp.sum(fn(q, k, v))
  else:  # the parameters get their gradient too, as in a train step (through the captures the step computes).
    x = jax.random.normal(jax.random.PRNGKey(2), (args.batch, length, args.heads * args.head_dim))
    inputs, loss = (q, k, v, params), lambda q, k, v, params: jnp.sum(fn(q, k, v, params=params,
                                                                         **captured(name, x, params)))
  step = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(inputs)))))
  start = time.perf_counter()
  compiled = step.lower(*inputs).compile()
  row = dict(variant=name, length=length, compile_s=round(time.perf_counter() - start, 2),
             temp_mib=round(compiled.memory_analysis().temp_size_in_bytes / MIB, 1), ms=None, min_ms=None,
             status="ok", **({"beside": BESIDE[name]} if name in BESIDE else {}))
  if row["temp_mib"] > args.max_temp_gib * 1024:
    row["status"] = "OOM"
    return row
  jax.block_until_ready(compiled(*inputs))
  times = []
  for _ in range(args.reps):
    start = time.perf_counter()
    jax.block_until_ready(compiled(*inputs))
    times.append(time.perf_counter() - start)
  row["ms"], row["min_ms"] = round(1e3 * statistics.median(times), 2), round(1e3 * min(times), 2)
  return row


def call_of(name: str, args):
  """The attention call a row times: its variant, causal, with its options, and ALiBi's bias computed in the step
  (as the model's `alibi` encoding computes it) for a `+alibi` name."""
  fn = functools.partial(attention.get(base_variant(name)).fn, causal=True, **args.options[name])
  return functools.partial(attention_with_alibi, fn, alibi_slopes(args.heads)) if name.endswith("+alibi") else fn


def attention_with_alibi(fn, slopes, q, k, v, **kwargs):
  """`fn` with ALiBi's bias `[1, H, T, S]` of `slopes` added to the logits (causal: -m_h (i - j))."""
  bias = alibi_bias(slopes, jnp.arange(q.shape[1]), jnp.arange(k.shape[1]), causal=True)
  return fn(q, k, v, bias=bias, **kwargs)


def table(rows: list[dict]) -> str:
  """Markdown table; time and memory also relative to the reference (dense `dot_product`) at the same length,
  and, for a flex row, to the hand-written path it is timed beside."""
  at = {(r["variant"], r["length"]): r for r in rows}
  ratio = lambda r, other, key, digits: (f"{r[key] / other[key]:.{digits}f}" if other and other.get(key) and r.get(key)
                                         and r["status"] == other["status"] == "ok" else "-")
  lines = ["| variant | length | fwd+bwd ms (median) | min ms | x ref time | temp MiB | x ref memory | "
           "x hand-written time | x hand-written memory | compile s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for r in rows:
    ref, beside = at.get((REFERENCE, r["length"])), at.get((r.get("beside"), r["length"]))
    ms, min_ms = ("OOM (not run)", "-") if r["status"] == "OOM" else (f"{r['ms']:.1f}", f"{r['min_ms']:.1f}")
    lines.append(f"| {r['variant']} | {r['length']} | {ms} | {min_ms} | {ratio(r, ref, 'ms', 2)} | "
                 f"{r['temp_mib']:.1f} | {ratio(r, ref, 'temp_mib', 3)} | {ratio(r, beside, 'ms', 2)} | "
                 f"{ratio(r, beside, 'temp_mib', 3)} | {r['compile_s']:.1f} |")
  return "\n".join(lines)


def main(argv=None):
  common.setup()
  args = parse_args(argv)
  machine = common.announce()
  print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}), batch {args.batch}, heads {args.heads}, "
        f"head_dim {args.head_dim}, causal, float32; options (beyond the defaults) {args.options}", flush=True)
  rows = []
  for length in args.lengths:
    for name in args.variants:
      rows.append(measure(name, length, args))
      print(json.dumps(rows[-1]), flush=True)
  print(table(rows))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(benchmark="attention", machine=machine, backend=jax.default_backend(), batch=args.batch,
                     heads=args.heads, head_dim=args.head_dim, options=args.options, rows=rows), f, indent=1)


if __name__ == "__main__":
  main()
