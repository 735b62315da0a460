"""Accelerator check: attention kernels against the reference, the BASE train step in bfloat16, decode throughput.

Run on a GPU or TPU machine; prints the machine, then one table (and `--json`), and exits non-zero when a kernel
misses its tolerance.
1. Attention: each library kernel of this backend (those with an `auto_priority`: GPU `cudnn`, `pallas_gpu`; TPU
   `splash`) and `auto`, against `dot_product` computed in float32 on the same (rounded) inputs, in bfloat16 and
   float32, output and gradients wrt query, key and value over the queries that see a key. Calls: causal self-attention
   with right padding; the same within a sliding window of length / 4 (`local`'s `window=`); cross-attention with
   padding; causal self-attention over packed rows (segment ids, no positions). Error = max |kernel - reference| / max |reference|, per output and per gradient; tolerances
   (TOLERANCE): bfloat16 3e-2 (output), 6e-2 (gradients); float32 1e-2 for both (GPU kernels may run float32
   matmuls in TF32, TPUs in bfloat16 passes at default precision). A call a kernel cannot express is listed as
   refused with its reason (e.g. cuDNN in float32), and `cudnn` is not given packed rows (it returns NaN for
   them by design; `auto` routes them per batch). Each row also times one jitted forward+backward.
2. The BASE train step (`benchmarks/train_step.py`'s `measure`: paper Adam, label smoothing, dropout 0.1,
   attention `auto`) with model.dtype bfloat16: tokens/s and MFU against an in-process bfloat16 matmul peak
   (PEAK_SIZE^3, timed between the steps).
3. Decoding (`benchmarks/decode.py`'s `measure`): beam 4 and greedy, output tokens/s, BASE in bfloat16.
On CPU everything is skipped (said so in the output); `--tiny` runs everything at tiny sizes instead, the Pallas
kernels in the interpreter (`cudnn` is skipped off GPU): a smoke test of this script, not figures.

    python benchmarks/accelerator.py [--reps=5] [--json=accelerator.json]
    python benchmarks/accelerator.py --tiny --reps=5 --json=''     # smoke run, any machine
"""

from __future__ import annotations

import argparse
import dataclasses

import common
import decode as decode_bench
import train_step

TOLERANCE = {"bfloat16": (3e-2, 6e-2), "float32": (1e-2, 1e-2)}  # (output, gradients), relative to max |ref|
PEAK_SIZE = 8192
TINY_PEAK_SIZE = 256
REFERENCE = "dot_product"


@dataclasses.dataclass(frozen=True)
class Sizes:
  """Attention test sizes and the model shape for the train step and decoding."""
  batch: int
  length: int
  heads: int
  head_dim: int
  shape: common.Shape
  peak_size: int


FULL = Sizes(batch=4, length=1024, heads=8, head_dim=64, shape=common.BASE, peak_size=PEAK_SIZE)
TINY = Sizes(batch=2, length=128, heads=2, head_dim=16, peak_size=TINY_PEAK_SIZE,
             shape=dataclasses.replace(common.TINY, name="TINY/4", vocab=512, d_model=64, d_ff=128, layers=1, batch=2,
                                       source_length=16, target_length=16))


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tiny", action="store_true", help="tiny sizes, everything run (a smoke test, any machine)")
  common.add_common_arguments(parser, default_json="accelerator.json")
  args = parser.parse_args(argv)
  common.check_reps(parser, args)
  return args


def attention_calls(sizes: Sizes, dtype):
  """{name: (query, key, value, masking)}: the calls each kernel is checked on (see the module doc)."""
  import jax
  import jax.numpy as jnp

  b, t, h, d = sizes.batch, sizes.length, sizes.heads, sizes.head_dim
  s = t // 2
  keys = jax.random.split(jax.random.PRNGKey(0), 6)
  q, k, v = (jax.random.normal(key, (b, t, h, d), dtype) for key in keys[:3])
  source_k, source_v = (jax.random.normal(key, (b, s, h, d), dtype) for key in keys[3:5])
  padding = (jnp.arange(t)[None] < jnp.array([[t - t // 8], [t]] * (b // 2) + [[t]] * (b % 2))).astype(jnp.int32)
  source_padding = (jnp.arange(s)[None] < jnp.array([[s], [s - s // 4]] * (b // 2) + [[s]] * (b % 2))).astype(
      jnp.int32)
  packed = (1 + (jnp.arange(t) >= t // 3) + (jnp.arange(t) >= t // 2))[None].repeat(b, 0) * padding
  window = (t // 4 - 1, t // 4 - 1)
  return {"self causal, padding": (q, k, v, dict(causal=True, q_segment_ids=padding, kv_segment_ids=padding)),
          f"self causal, window {t // 4}, padding": (q, k, v, dict(causal=True, q_segment_ids=padding,
                                                                  kv_segment_ids=padding, window=window)),
          "cross, padding": (q, source_k, source_v, dict(q_segment_ids=padding, kv_segment_ids=source_padding)),
          "self causal, packed rows": (q, k, v, dict(causal=True, q_segment_ids=packed, kv_segment_ids=packed))}


def check_kernel(name: str, call, reps: int) -> dict:
  """Errors of `name` against the float32 reference on `call`, and its jitted fwd+bwd time."""
  import jax
  import jax.numpy as jnp
  import numpy as np

  from jformer import attention

  q, k, v, masking = call
  rows = np.asarray(masking["q_segment_ids"] != 0)
  cotangent = jax.random.normal(jax.random.PRNGKey(9), q.shape, jnp.float32) * rows[:, :, None, None]

  def loss(fn, q, k, v):
    out = fn(q, k, v, **masking)
    return jnp.sum(out.astype(jnp.float32) * cotangent), out

  def fwd_bwd(variant: str):  # (loss, output), gradients wrt q, k, v
    return jax.jit(jax.value_and_grad(lambda *x: loss(attention.get(variant).fn, *x), argnums=(0, 1, 2),
                                      has_aux=True))

  step = fwd_bwd(name)
  (_, out), grads = step(q, k, v)
  (_, want), want_grads = fwd_bwd(REFERENCE)(*(x.astype(jnp.float32) for x in (q, k, v)))
  relative = lambda got, ref: float(np.abs(np.asarray(got, np.float32) - np.asarray(ref, np.float32)).max()
                                    / max(np.abs(np.asarray(ref, np.float32)).max(), 1e-30))
  out_error = relative(np.asarray(out, np.float32)[rows], np.asarray(want)[rows])
  grad_error = max(relative(g, w) for g, w in zip(grads, want_grads))
  timing = common.time_repeated(lambda: step(q, k, v), reps)
  out_tolerance, grad_tolerance = TOLERANCE[jnp.dtype(q.dtype).name]
  passed = out_error <= out_tolerance and grad_error <= grad_tolerance
  return {"output_error": out_error, "grad_error": grad_error, "fwd_bwd_ms": timing.summary(1e3, 3),
          "status": "pass" if passed else "FAIL", "tolerance": [out_tolerance, grad_tolerance]}


def kernels_to_check(backend: str, tiny: bool) -> tuple[list[str], list[str]]:
  """(kernels to check, lines saying what is skipped)."""
  from jformer import attention

  names, skipped = [], []
  library = sorted((name for name, variant in attention.REGISTRY.items() if variant.auto_priority is not None))
  for name in library:
    platforms = attention.get(name).platforms
    interpretable = "interpret" in attention.get(name).options
    if backend in platforms or (tiny and interpretable):
      names.append(name)
    else:
      why = "it would run in the Pallas interpreter: use --tiny" if interpretable else "it runs nowhere else"
      skipped.append(f"{name}: built for {sorted(platforms)}, this backend is {backend} ({why})")
  return names + ["auto"], skipped


def main(argv=None):
  common.setup()
  args = parse_args(argv)

  import jax
  import jax.numpy as jnp

  from jformer import attention
  from jformer.models import Transformer

  machine = common.announce()
  backend = jax.default_backend()
  sizes = TINY if args.tiny else FULL
  accelerated = backend in ("gpu", "tpu")
  print(f"backend {backend} ({jax.devices()[0].device_kind}); attention batch {sizes.batch}, length {sizes.length}, "
        f"heads {sizes.heads}, head_dim {sizes.head_dim}; model {sizes.shape.name}", flush=True)
  names, skipped = kernels_to_check(backend, args.tiny)
  if not (accelerated or args.tiny):
    skipped.append(f"attention checks of {names}: no GPU or TPU here (use --tiny for a smoke run)")
    names = []
  table, results = [], {"machine": machine, "attention": [], "skipped": skipped}
  for dtype in ("bfloat16", "float32"):
    for call_name, call in attention_calls(sizes, jnp.dtype(dtype)).items():
      for name in names:
        if name == "cudnn" and "packed" in call_name:
          continue  # NaN by design (see the module doc); `auto` covers packed rows on GPU.
        refusal = attention.get(name).refusal(*call[:3], **call[3])
        row = {"kernel": name, "dtype": dtype, "call": call_name}
        if refusal is not None:
          row.update(status="refused", reason=refusal)
          table.append([f"attention {name}: {call_name}", dtype, "refused", refusal])
        else:
          row.update(check_kernel(name, call, args.reps))
          label = name if name != "auto" else f"auto ({auto_label(call, backend)})"
          table.append([f"attention {label}: {call_name}", dtype, row["status"],
                        f"output {row['output_error']:.1e} <= {row['tolerance'][0]:.0e}, gradients "
                        f"{row['grad_error']:.1e} <= {row['tolerance'][1]:.0e}, fwd+bwd "
                        f"{row['fwd_bwd_ms']['median']} ms"])
        results["attention"].append(row)
        print(" | ".join(str(x) for x in table[-1]), flush=True)

  if accelerated or args.tiny:
    shape = sizes.shape
    probe = common.peak_matmul(sizes.peak_size, "bfloat16")
    step = train_step.measure(shape, "auto", args.reps, probe, peak_flops=2 * sizes.peak_size**3, dtype=jnp.bfloat16)
    results["train_step"] = step
    table.append([f"train step {shape.name}, {step['attention']}", "bfloat16", f"{step['tokens_per_s']:,} tokens/s",
                  f"{step['step_ms']['median']} ms/step, MFU {100 * step['mfu']:.1f}% of {step['peak_gflop_per_s']:,} "
                  f"GFLOP/s (bfloat16 {sizes.peak_size}^3 matmul peak)"])
    print(" | ".join(str(x) for x in table[-1]), flush=True)
    model = Transformer(shape.model_config(dtype=jnp.bfloat16))
    inputs = decode_bench.random_inputs(shape.vocab)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs, inputs[:, :1])["params"]
    results["decode"] = []
    for method in ("beam", "greedy"):
      row, = decode_bench.measure(model, params, inputs, method, args.reps)  # jformer's row alone.
      results["decode"].append(row)
      table.append([f"decode {shape.name} {row['method']}, batch {decode_bench.BATCH}", "bfloat16",
                    f"{row['tokens_per_s']:,} tokens/s", f"{row['ms_per_step']} ms/step"])
      print(" | ".join(str(x) for x in table[-1]), flush=True)
  else:
    skipped.append(f"train step and decoding of {sizes.shape.name}: no GPU or TPU here (use --tiny for a smoke run)")

  print(common.markdown_table(["check", "dtype", "result", "figures"], table))
  for line in skipped:
    print(f"skipped {line}")
  common.write_json(args.json, {"benchmark": "accelerator", "tiny": args.tiny, **results})
  failed = [r for r in results["attention"] if r["status"] == "FAIL"]
  if failed:
    raise SystemExit(f"{len(failed)} attention check(s) over tolerance: "
                     f"{[(r['kernel'], r['dtype'], r['call']) for r in failed]}")


def auto_label(call, backend: str) -> str:
  """The kernel `auto` picks for `call` on `backend` (and its per-batch alternative)."""
  from jformer.attention import auto

  q, k, v, masking = call
  choice = auto.choose(q, k, v, backend=backend, **masking)
  return choice.kernel + ("" if choice.otherwise is None else f"/{choice.otherwise.kernel}")


if __name__ == "__main__":
  main()
