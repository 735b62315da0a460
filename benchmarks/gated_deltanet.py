"""Gated DeltaNet (`gated_deltanet`): forward+backward time of its chunked training form against its step-by-step
recurrence, on CPU.

One causal self-attention call of `--length` tokens (batch `--batch`, `--heads` heads of head_dim `--head_dim`,
float32; random queries, keys, values, parameters and gate logits), and one jitted step that computes the loss
sum(out) and its gradients wrt queries, keys, values, the parameters and the gate logits, in two forms of the
same recurrence S_t = alpha_t S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T (jformer/attention/gated_deltanet.py):
the chunked form (the WY representation, a triangular solve per chunk and a `lax.scan` over T / C chunks) for each
chunk size C of `--chunk_sizes`, and the recurrence one token at a time (a `lax.scan` over T tokens: the decode
step from an empty state). Each row: compile seconds (once), the step's median (min-max) over two rounds of
`--reps` timed runs after a warm-up, the forms taking turns (`common.time_in_rounds`), with the other processes' CPU
share per run; and the largest difference of its output from the recurrence's. The first line names the machine
(CPU model and SIMD flags, `common.announce`).

    python benchmarks/gated_deltanet.py --json=benchmarks/results/gated_deltanet.json   # 2,048 tokens: minutes
    python benchmarks/gated_deltanet.py --length=256 --reps=5 --json=    # a quick look at a small size
"""

from __future__ import annotations

import argparse
import functools
import time

import common


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--length", type=int, default=2048, help="tokens of the call")
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--heads", type=int, default=2)
  parser.add_argument("--head_dim", type=int, default=32, help="of queries, keys and values")
  parser.add_argument("--chunk_sizes", default="32,64,128", help="comma-separated chunk sizes of the chunked form")
  common.add_common_arguments(parser, default_json="gated_deltanet.json")
  args = parser.parse_args(argv)
  common.check_reps(parser, args)
  args.chunk_sizes = [int(c) for c in args.chunk_sizes.split(",")]
  if min(args.length, args.batch, args.heads, args.head_dim, *args.chunk_sizes) < 1:
    parser.error("--length, --batch, --heads, --head_dim and --chunk_sizes take positive ints")
  return args


def inputs(args) -> tuple:
  """(q, k, v, params, captures): random, the parameters as the model initialises them (d_model = heads x
  head_dim), the gate logits normal."""
  import jax

  from jformer import registry
  from jformer.attention import gated_deltanet

  keys = jax.random.split(jax.random.PRNGKey(0), 6)
  shape = (args.batch, args.length, args.heads, args.head_dim)
  q, k, v = (jax.random.normal(key, shape) for key in keys[:3])
  params = registry.init_params(gated_deltanet.PARAMS, dict(heads=args.heads, d_model=args.heads * args.head_dim),
                                keys[3])
  logits = {name: jax.random.normal(key, shape[:3]) for name, key in zip(sorted(gated_deltanet.CAPTURES), keys[4:])}
  return q, k, v, params, {"q": logits, "kv": logits}


def forms(args) -> dict:
  """{row name: fn(q, k, v, params, captures) -> out}: the chunked form per chunk size, then the recurrence."""
  from jformer import attention
  from jformer.attention import gated_deltanet

  chunked = lambda c: functools.partial(attention.get("gated_deltanet").fn, causal=True, chunk_size=c)
  rows = {f"chunked (C={c})": lambda q, k, v, p, cap, c=c: chunked(c)(q, k, v, params=p, captures=cap)
          for c in args.chunk_sizes}
  init = functools.partial(gated_deltanet.decode_init, args.batch, args.heads, args.head_dim, args.head_dim)
  rows["recurrence (token by token)"] = lambda q, k, v, p, cap: gated_deltanet.decode_step(
      init(), q, k, v, params=p, captures=cap)[0]
  return rows


def main(argv=None):
  common.setup()
  args = parse_args(argv)
  machine = common.announce()
  import jax
  import jax.numpy as jnp

  print(f"backend {jax.default_backend()} ({jax.devices()[0].device_kind}), {args.length} tokens, batch "
        f"{args.batch}, {args.heads} heads, head_dim {args.head_dim}, causal, float32", flush=True)
  arrays = inputs(args)
  rows, steps, outputs = [], [], {}
  for name, fn in forms(args).items():
    step = jax.jit(jax.value_and_grad(lambda *a, fn=fn: jnp.sum(fn(*a)), argnums=(0, 1, 2, 3, 4)))
    start = time.perf_counter()
    compiled = step.lower(*arrays).compile()
    rows.append({"form": name, "compile_s": round(time.perf_counter() - start, 2)})
    steps.append(functools.partial(compiled, *arrays))
    outputs[name] = jax.jit(fn)(*arrays)
  recurrence = outputs[rows[-1]["form"]]
  for row, timing in zip(rows, common.time_in_rounds(steps, args.reps)):
    row["ms"] = timing.summary(scale=1e3)
    row["max_difference"] = float(jnp.max(jnp.abs(outputs[row["form"]] - recurrence)))
  print(common.markdown_table(
      ["form", "fwd+bwd ms median (min-max)", "x recurrence time", "compile s", "max \\|out - recurrence out\\|",
       "disturbed reps"],
      [[r["form"], f"{r['ms']['median']} ({r['ms']['min']}-{r['ms']['max']})",
        f"{r['ms']['median'] / rows[-1]['ms']['median']:.3f}", r["compile_s"], f"{r['max_difference']:.1e}",
        f"{r['ms']['disturbed']}/{r['ms']['reps']}"] for r in rows]))
  common.write_json(args.json, {"benchmark": "gated_deltanet", "machine": machine, "length": args.length,
                                "batch": args.batch, "heads": args.heads, "head_dim": args.head_dim, "rows": rows})


if __name__ == "__main__":
  main()
