"""Context parallelism: the long-context train step's memory per device against the sequence axis, and the step
time of gather against ring.

For each size n of the mesh's sequence axis in `--sizes` (the other axes 1; on a CPU the script simulates 8 devices
unless XLA_FLAGS says otherwise) and each strategy (`parallel.context_strategy`; one row at n = 1, where nothing is
split): the train step of configs/lm_long.py (one row of 16,384 tokens, each device holding 16,384 / n of them) is
lowered and compiled without running, and `compiled.memory_analysis()` gives the bytes one device needs besides
the state: temp (activations kept for the backward pass, gradients, scratch) and the batch and state it takes as
arguments. These are properties of the program, the same on every run.

With `--time`, the steps at the `--time_sizes` are also run: gather and ring compiled side by side in one process,
then timed in turns (`common.time_in_rounds`), median step seconds of `--reps` per round. On simulated CPU devices
the n "devices" share the machine's cores, so these times compare the two strategies' work and traffic, not a
speed-up from n devices.

    python benchmarks/context_parallel.py --json=benchmarks/results/context_parallel.json     # memory: minutes
    python benchmarks/context_parallel.py --time --json=benchmarks/results/context_parallel.json   # and times
    python benchmarks/context_parallel.py --sizes=1,2 --length=1024 --json=   # a quick look at a small size
"""

from __future__ import annotations

import argparse
import os
import time

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import common  # noqa: E402

GIB = 2**30
CONFIG = common.REPO / "configs" / "lm_long.py"


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--sizes", default="1,2,4,8", help="sizes of the sequence axis")
  parser.add_argument("--strategies", default="gather,ring")
  parser.add_argument("--length", type=int, default=16_384, help="tokens per row (configs/lm_long.py: 16,384)")
  parser.add_argument("--time", action="store_true", help="also run and time the steps at --time_sizes")
  parser.add_argument("--time_sizes", default="8")
  common.add_common_arguments(parser, default_json="context_parallel.json")
  args = parser.parse_args(argv)
  args.sizes = [int(x) for x in args.sizes.split(",")]
  args.time_sizes = [int(x) for x in args.time_sizes.split(",")] if args.time else []
  args.strategies = args.strategies.split(",")
  if args.time:
    common.check_reps(parser, args)
  return args


def runner_for(size: int, strategy: str, length: int):
  """(runner, one row of random tokens) for configs/lm_long.py on `size` devices along the sequence axis."""
  import jax
  import numpy as np

  from jformer import config as config_lib
  from jformer import tasks
  from jformer.train import optim
  from jformer.train.runner import make_runner

  config = config_lib.load(str(CONFIG), {"parallel.sequence": size, "parallel.context_strategy": strategy,
                                         "data.max_length": length, "model.max_length": length,
                                         "train.eval_lengths": (length,)})
  model = tasks.build_model(config)
  tx, schedule = optim.build_optimizer(config.optimizer, config.model.d_model)
  rows = config.data.batch_size
  batch = {"targets": np.random.default_rng(0).integers(1, config.model.vocab_size, (rows, length), dtype=np.int32)}
  runner = make_runner(config_lib.run_settings(config), model, tx, schedule, {"targets": batch["targets"][:1]})
  assert jax.device_count() >= size, f"{size} devices needed, {jax.device_count()} found"
  return runner, batch


def memory_row(size: int, strategy: str, length: int) -> tuple[dict, object]:
  runner, batch = runner_for(size, strategy, length)
  compiled = runner.lower_step(runner.abstract_state(), batch).compile()
  analysis = compiled.memory_analysis()
  row = {"strategy": strategy if size > 1 else "-", "sequence": size, "tokens_per_device": length // size,
         "temp_gib": round(analysis.temp_size_in_bytes / GIB, 4),
         "arguments_gib": round(analysis.argument_size_in_bytes / GIB, 4), "step_s": None}
  return row, (runner, batch)


def timed(runners: list[tuple[object, dict]], reps: int) -> list[dict]:
  """Median step seconds of each (runner, batch), timed in turns in this process."""
  import jax

  calls = []
  for runner, batch in runners:
    held = {"state": runner.init_state(jax.random.PRNGKey(0))}

    def step(runner=runner, batch=batch, held=held):
      held["state"], metrics = runner.train_step(held["state"], batch)
      return metrics["loss"]

    calls.append(step)
  return [t.summary(digits=3) for t in common.time_in_rounds(calls, reps)]


def main(argv=None):
  common.setup()
  args = parse_args(argv)
  machine = common.announce()
  rows, to_time = [], []
  for size in args.sizes:
    for strategy in args.strategies[:1] if size == 1 else args.strategies:
      begin = time.perf_counter()
      row, runner = memory_row(size, strategy, args.length)
      rows.append(row)
      print(row, f"({time.perf_counter() - begin:.0f} s)", flush=True)
      if size in args.time_sizes:
        to_time.append((row, runner))
  if to_time:
    for (row, _), summary in zip(to_time, timed([runner for _, runner in to_time], args.reps)):
      row["step_s"] = summary
      print(row, flush=True)
  base = rows[0]["temp_gib"]
  print(common.markdown_table(
      ["strategy", "sequence axis", "tokens per device", "temp GiB per device", "x n=1", "arguments GiB",
       "step s (median)"],
      [[r["strategy"], r["sequence"], r["tokens_per_device"], r["temp_gib"], round(r["temp_gib"] / base, 3),
        r["arguments_gib"], "-" if r["step_s"] is None else r["step_s"]["median"]] for r in rows]))
  common.write_json(args.json, {"benchmark": "context_parallel", "machine": machine,
                                "model": f"configs/lm_long.py, one row of {args.length} tokens", "rows": rows})


if __name__ == "__main__":
  main()
