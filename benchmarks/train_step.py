"""Train step throughput: tokens/s and CPU MFU for the TINY and BASE shapes, per attention variant.

One jitted, donated train step of jformer's own `make_train_step` (paper Adam, label smoothing 0.1, dropout 0.1,
random ids without padding) per (shape, attention, compute dtype: float32, and bfloat16 = `model.dtype` 'bfloat16',
products accumulated in float32, parameters and Adam state float32). Tokens/s counts source + target tokens; model
FLOPs are the matmul formula of `common.Shape.forward_flops` x 3; XLA's `cost_analysis()` FLOPs are printed beside
it (XLA counts the body of a while loop once: the output projection runs as a loop over target chunks, see
`jformer/ops/linear_cross_entropy.py`, so XLA's figure is lower). The peak matmul runs after every timed step
(interleaved), in the row's dtype (bf16 x bf16 -> float32 for bfloat16), and each row's MFU divides by the median of
those runs: the machine's speed drifts by 10%. Rows also give their FLOP/s over the float32 peak measured at the
start ("of f32 peak"), which compares the dtypes on one scale. The default attention is `auto`; every other
registered variant that supports the model runs too (the library kernels `cudnn`, `splash`, `pallas_gpu` run inside
`auto`: the model refuses them as `model.attention`, they run no decode steps), with
`AttentionVariant.runnable_options` (its defaults, and its `example_options` value for an option it requires); a
variant with learned parameters gets them from the model.

    python benchmarks/train_step.py                      # TINY and BASE, every variant (about 15 minutes)
    python benchmarks/train_step.py --shapes=TINY --variants=auto --dtypes=bfloat16 --reps=10
"""

from __future__ import annotations

import argparse

import common


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shapes", default="TINY,BASE", help=f"comma-separated, from {sorted(common.SHAPES)}")
  parser.add_argument("--variants", default="", help="comma-separated attention variants (default: auto + all)")
  common.add_common_arguments(parser, default_json="train_step.json")
  common.add_dtypes_argument(parser)
  args = parser.parse_args(argv)
  common.check_reps(parser, args)
  args.dtypes = common.dtypes(parser, args)
  unknown = [s for s in args.shapes.split(",") if s not in common.SHAPES]
  if unknown:
    parser.error(f"unknown shape(s) {unknown}; known: {sorted(common.SHAPES)}")
  return args


def variants_to_run(requested: str) -> list[tuple[str, str]]:
  """(variant, reason to skip or '') in order: the default first."""
  from jformer import attention

  names = requested.split(",") if requested else ["auto"] + [n for n in attention.available() if n != "auto"]
  rows = []
  for name in names:
    variant = attention.get(name)  # a KeyError naming the known variants.
    skip = "" if "decode" in variant.supports else "a library kernel: the model runs it inside 'auto' only"
    rows.append((name, skip))
  return rows


def compile_step(shape: common.Shape, variant: str, **model_overrides):
  """(compiled train step, its initial state, a random batch, the model config) of `shape` with attention
  `variant` and `model_overrides` of its model config (e.g. dtype): paper Adam, label smoothing 0.1, the state
  donated."""
  import jax

  from jformer import attention
  from jformer import config as config_lib
  from jformer.models import Transformer
  from jformer.train import optim, state as state_lib, step as step_lib

  model_config = shape.model_config(attention=variant,
                                    attention_options=tuple(sorted(attention.get(variant).runnable_options().items())),
                                    **model_overrides)
  model_config.validate()
  model = Transformer(model_config)
  tx, schedule = optim.build_optimizer(config_lib.base_config().optimizer, shape.d_model)
  batch = jax.tree.map(jax.numpy.asarray, shape.random_batch())
  state = state_lib.init_train_state(model, tx, jax.random.PRNGKey(0), batch)
  train_step = jax.jit(step_lib.make_train_step(model, tx, schedule, label_smoothing=0.1), donate_argnums=0)
  return train_step.lower(state, batch).compile(), state, batch, model_config


def step_runner(shape: common.Shape, variant: str, **model_overrides):
  """(run, compiled step, model config): `run()` takes one train step of `compile_step(shape, variant,
  **model_overrides)` on its batch, the state carried from call to call, and returns (state, metrics)."""
  compiled, state, batch, model_config = compile_step(shape, variant, **model_overrides)
  holder = {"state": state}

  def run():
    holder["state"], metrics = compiled(holder["state"], batch)
    return holder["state"], metrics

  return run, compiled, model_config


def measure(shape: common.Shape, variant: str, reps: int, probe, peak_flops: int = common.PEAK_FLOPS,
            **model_overrides) -> dict:
  """Compiles and times the train step of `shape` with attention `variant` (and `model_overrides` of its model
  config, e.g. dtype); MFU against `probe`, a call of `peak_flops` FLOPs timed between the steps."""
  import jax

  run, compiled, model_config = step_runner(shape, variant, **model_overrides)
  timing, peak_timing = common.time_interleaved(run, probe, reps)
  tokens = shape.batch * (shape.source_length + shape.target_length)
  return {"shape": shape.name, "dtype": jax.numpy.dtype(model_config.dtype).name,
          "attention": common.attention_label(variant, shape, model_config.dtype),
          "step_ms": timing.summary(1e3, 1),
          "tokens_per_s": round(tokens / timing.median), "model_gflop": round(shape.train_flops() / 1e9, 1),
          "xla_gflop": round((common.xla_flops(compiled) or 0) / 1e9, 1),
          "model_gflop_per_s": round(shape.train_flops() / timing.median / 1e9, 1),
          "peak_gflop_per_s": round(peak_flops / peak_timing.median / 1e9, 1),
          "peak_ms": peak_timing.summary(1e3),
          "mfu": round(shape.train_flops() / timing.median / (peak_flops / peak_timing.median), 3)}


def main(argv=None):
  common.setup()
  args = parse_args(argv)
  import jax

  machine = common.announce()
  peak, peak_timing = common.matmul_peak()
  print(f"peak (2048^3 float32 matmul, median of {len(peak_timing.seconds)}): {peak / 1e9:.1f} GFLOP/s; each "
        "row's MFU divides by the median of the peak runs in its dtype interleaved with its steps", flush=True)
  rows, skipped = [], []
  for dtype in args.dtypes:
    probe = common.peak_matmul(dtype=dtype)
    for shape_name in args.shapes.split(","):
      shape = common.SHAPES[shape_name]
      for variant, skip in variants_to_run(args.variants):
        if skip:
          skipped.append({"shape": shape_name, "attention": variant, "skipped": skip})
          continue
        try:
          row = measure(shape, variant, args.reps, probe, dtype=jax.numpy.dtype(dtype))
        except ValueError as e:  # the variant cannot build this model (an unsupported feature, a bad option).
          skipped.append({"shape": shape_name, "attention": variant, "skipped": str(e)})
          continue
        row["mfu_of_float32_peak"] = round(row["model_gflop_per_s"] * 1e9 / peak, 3)
        rows.append(row)
        print(f"{shape_name} {dtype} {row['attention']}: {row['step_ms']['median']} ms/step, {row['tokens_per_s']} "
              f"tokens/s, MFU {100 * row['mfu']:.1f}% of {row['peak_gflop_per_s']} GFLOP/s ({dtype} peak), "
              f"{100 * row['mfu_of_float32_peak']:.1f}% of the float32 peak, disturbed reps "
              f"{row['step_ms']['disturbed']}", flush=True)
  print(common.markdown_table(
      ["shape", "dtype", "attention", "step ms median (min-max)", "tokens/s", "model GFLOP", "XLA GFLOP", "GFLOP/s",
       "peak GFLOP/s (dtype)", "CPU MFU", "of f32 peak", "disturbed reps"],
      [[r["shape"], r["dtype"], r["attention"],
        f"{r['step_ms']['median']} ({r['step_ms']['min']}-{r['step_ms']['max']})",
        f"{r['tokens_per_s']:,}", r["model_gflop"], r["xla_gflop"], r["model_gflop_per_s"], r["peak_gflop_per_s"],
        f"{100 * r['mfu']:.1f}%", f"{100 * r['mfu_of_float32_peak']:.1f}%",
        f"{r['step_ms']['disturbed']}/{r['step_ms']['reps']}"] for r in rows]))
  for s in skipped:
    print(f"skipped {s['shape']} {s['attention']}: {s['skipped']}")
  common.write_json(args.json, {"benchmark": "train_step", "machine": machine,
                                "peak_gflop_per_s": round(peak / 1e9, 1), "peak": peak_timing.summary(1e3),
                                "rows": rows, "skipped": skipped})


if __name__ == "__main__":
  main()
