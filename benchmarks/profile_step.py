"""Where a train step's time goes: `jax.profiler` trace of compiled train steps, XLA:CPU op time by kind.

The TINY or BASE step of `train_step.py` (attention `auto`, dropout 0.1, label smoothing 0.1, Adam) in each dtype:
three warm steps, then three traced ones; prints per op kind (the thunk names of the trace with their numeric
suffix removed, e.g. `ynn_fusion` = products XLA hands to its matmul library, `transpose_copy_fusion`, `dot`)
the milliseconds per step and the share of all op time, and the step's matmul FLOPs over the time of the
matmul kinds. Op time can exceed the step time where XLA runs two ops at once on the two cores. Beside it: the ops
a step runs (distinct thunks; a step of many small ops pays the executor's dispatch for each) and the traced time
during which no op runs at all (dispatch, waits between dependent ops).

    python benchmarks/profile_step.py [--shape=TINY] [--dtypes=float32,bfloat16] [--top=12] [--json=profile_step.json]
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import tempfile
import time

import common

TRACED_STEPS = 3
# Op kinds that are matrix products (the FLOPs of `Shape.train_flops` run in them).
MATMUL_KINDS = ("ynn_fusion", "dot", "dot_general", "xnn_fusion", "onednn")
# Trace events that wrap ops (executors, thread pools, the jitted call): not counted as op time.
WRAPPERS = ("ThunkExecutor", "$", "PjitFunction", "SlinkyThreadPool", "TraceMe", "XlaModule")
# Events that are the runtime's bookkeeping or a thread pool's record of a task, not an op of the program.
NOT_OPS = ("ThreadpoolListener", "end: ", "CommonPjRt", "ParseArguments", "Handle input", "AllocateOutput", "Wait for")


def op_events(trace_dir: str) -> list[dict]:
  """The op events ("X" events that are not wrappers) of the Perfetto trace in `trace_dir`."""
  path = glob.glob(f"{trace_dir}/**/*perfetto_trace.json.gz", recursive=True)[0]
  with gzip.open(path) as f:
    trace = json.load(f)
  events = trace["traceEvents"] if isinstance(trace, dict) else trace
  return [e for e in events if e.get("ph") == "X" and not e["name"].startswith(WRAPPERS)]


def op_times(events: list[dict]) -> collections.Counter:
  """{op kind: microseconds over all traced steps}."""
  kinds = collections.Counter()
  for event in events:
    kinds[re.sub(r"\.\d+$", "", event["name"])] += event.get("dur", 0)
  return kinds


def idle_micros(events: list[dict]) -> float:
  """Microseconds between the first op and the last during which no op runs on any thread."""
  covered, end = 0.0, None
  for start, stop in sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events):
    if end is None or start > end:
      covered, end = covered + stop - start, stop
    elif stop > end:
      covered, end = covered + stop - end, stop
  first = min(e["ts"] for e in events)
  return (end - first) - covered


def profile(shape: common.Shape, dtype: str) -> dict:
  import jax
  import jax.numpy as jnp

  import train_step

  step, state, batch, _ = train_step.compile_step(shape, "auto", dtype=jnp.dtype(dtype))
  for _ in range(3):
    state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
  with tempfile.TemporaryDirectory() as trace_dir:
    start = time.perf_counter()
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      for _ in range(TRACED_STEPS):
        state, metrics = step(state, batch)
        jax.block_until_ready(metrics)
    step_ms = (time.perf_counter() - start) / TRACED_STEPS * 1e3
    events = op_events(trace_dir)
  per_step = {kind: micros / TRACED_STEPS / 1e3 for kind, micros in op_times(events).items()}
  program_ops = [e for e in events if not e["name"].startswith(NOT_OPS)]
  matmul_ms = sum(ms for kind, ms in per_step.items() if kind.startswith(MATMUL_KINDS))
  return {"shape": shape.name, "dtype": dtype, "step_ms_traced": round(step_ms, 1),
          "op_ms": {kind: round(ms, 2) for kind, ms in sorted(per_step.items(), key=lambda kv: -kv[1])},
          "matmul_ms": round(matmul_ms, 1), "ops_per_step": len({e["name"] for e in program_ops}),
          "idle_ms": round(idle_micros(program_ops) / TRACED_STEPS / 1e3, 1),
          "matmul_gflop_per_s": round(shape.train_flops() / matmul_ms / 1e6, 1)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shape", default="TINY", choices=sorted(common.SHAPES))
  parser.add_argument("--top", type=int, default=12, help="op kinds listed per dtype")
  parser.add_argument("--json", default="profile_step.json", help="write the results here ('' = do not)")
  common.add_dtypes_argument(parser)
  args = parser.parse_args()
  dtypes = common.dtypes(parser, args)
  common.setup()
  machine = common.announce()
  shape = common.SHAPES[args.shape]
  results = []
  for dtype in dtypes:
    result = profile(shape, dtype)
    results.append(result)
    total = sum(result["op_ms"].values())
    print(f"\n{shape.name} {dtype}: {result['step_ms_traced']} ms per traced step, {total:.0f} ms of op time; "
          f"matmul kinds {result['matmul_ms']} ms = {result['matmul_gflop_per_s']} GFLOP/s on "
          f"{shape.train_flops() / 1e9:.1f} GFLOP; {result['ops_per_step']} ops per step, no op running for "
          f"{result['idle_ms']} ms", flush=True)
    rows = [[kind, f"{ms:.1f}", f"{100 * ms / total:.1f}%"] for kind, ms in list(result["op_ms"].items())[:args.top]]
    print(common.markdown_table(["op kind", "ms per step", "share of op time"], rows), flush=True)
  common.write_json(args.json, {"benchmark": "profile_step", "machine": machine, "results": results})


if __name__ == "__main__":
  main()
