"""Train step memory: XLA's temporary bytes for the BASE train step at batch 1 and long sequences.

For each attention (default `auto`, and `chunked`) and length L in 128, 512, 2048, 8192 (source = target = L):
`compiled.memory_analysis()` of the jitted, donated BASE train step (common.BASE at batch 1, dropout 0.1,
paper Adam, default `model.remat="auto"`: layers rematerialized from 1024 tokens) gives the temporary bytes
(activations kept for the backward pass, gradients, scratch) besides the arguments and outputs (parameters and
optimizer state). The steps at `--run_lengths` are then also run once,
after a warm-up run, to show they fit and to time them.

    python benchmarks/memory.py                            # about 10 minutes (the 8192 step runs twice)
    python benchmarks/memory.py --lengths=128,2048 --run_lengths=
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time

import common

GIB = 2**30


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--lengths", default="128,512,2048,8192")
  parser.add_argument("--variants", default="auto,chunked", help="attention variants (auto = the default)")
  parser.add_argument("--run_lengths", default="8192", help="lengths whose default-attention step is also run")
  parser.add_argument("--json", default="memory.json", help="write the results here ('' = do not)")
  args = parser.parse_args(argv)
  args.lengths = [int(x) for x in args.lengths.split(",")]
  args.run_lengths = [int(x) for x in args.run_lengths.split(",") if x]
  args.variants = args.variants.split(",")
  return args


def measure(length: int, variant: str, run: bool) -> dict:
  import jax

  from jformer import config as config_lib
  from jformer.models import Transformer
  from jformer.train import optim, state as state_lib, step as step_lib

  shape = dataclasses.replace(common.BASE, batch=1, source_length=length, target_length=length)
  model_config = shape.model_config(attention=variant)
  model = Transformer(model_config)
  tx, schedule = optim.build_optimizer(config_lib.base_config().optimizer, shape.d_model)
  batch = jax.tree.map(jax.numpy.asarray, shape.random_batch())
  state = jax.eval_shape(lambda: state_lib.init_train_state(model, tx, jax.random.PRNGKey(0), batch))
  train_step = jax.jit(step_lib.make_train_step(model, tx, schedule, label_smoothing=0.1), donate_argnums=0)
  begin = time.perf_counter()
  compiled = train_step.lower(state, batch).compile()
  analysis = compiled.memory_analysis()
  row = {"attention": common.attention_label(variant, shape, model_config.dtype), "length": length,
         "compile_s": round(time.perf_counter() - begin, 1),
         "temp_gib": round(analysis.temp_size_in_bytes / GIB, 3),
         "arguments_gib": round(analysis.argument_size_in_bytes / GIB, 3),
         "outputs_gib": round(analysis.output_size_in_bytes / GIB, 3), "step_s": None}
  if run:
    state = state_lib.init_train_state(model, tx, jax.random.PRNGKey(0), batch)
    state, _ = jax.block_until_ready(compiled(state, batch))  # warm-up
    begin = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(state, batch))
    row["step_s"] = round(time.perf_counter() - begin, 1)
    row["loss"] = round(float(metrics["loss"]), 3)
    row["max_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 2)
  return row


def main(argv=None):
  common.setup()
  args = parse_args(argv)
  machine = common.announce()
  rows = []
  for length in args.lengths:
    for variant in args.variants:
      rows.append(measure(length, variant, run=variant == "auto" and length in args.run_lengths))
      print(rows[-1], flush=True)
  print(common.markdown_table(
      ["attention", "length", "temp GiB", "arguments GiB", "outputs GiB", "compile s", "step s (run once)",
       "process max RSS GiB"],
      [[r["attention"], r["length"], r["temp_gib"], r["arguments_gib"], r["outputs_gib"], r["compile_s"],
        r["step_s"] if r["step_s"] is not None else "-", r.get("max_rss_gib", "-")] for r in rows]))
  common.write_json(args.json, {"benchmark": "memory", "machine": machine, "shape": "BASE, batch 1", "rows": rows})


if __name__ == "__main__":
  main()
