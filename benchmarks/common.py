"""What every benchmark script shares: repeated timing with CPU-disturbance accounting, the machine's matmul peak,
model shapes and FLOP formulas, tables and JSON.

Rules (README "Performance"): compile and warm up first; wait with `jax.block_until_ready`; at least 5 timed
repetitions, reported as median (min/max); for each repetition the fraction of all CPU time spent by *other*
processes (from /proc/stat, minus this process's own CPU time), a repetition above 10% flagged as disturbed;
peak = median FLOP/s of a jitted float32 2048x2048 @ 2048x2048 matmul in the same process; CPU MFU = model
FLOP/s / peak. Call `setup()` before the first JAX computation.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shlex
import statistics
import sys
import time
from typing import Callable

REPO = pathlib.Path(__file__).resolve().parents[1]
DISTURBED_ABOVE = 0.10
MIN_REPS = 5
PEAK_SIZE = 2048


def setup() -> None:
  """Process settings every jformer entry point uses (jformer/runtime.py); before JAX starts its threads."""
  from jformer import runtime

  runtime.configure_host_allocator()


@dataclasses.dataclass(frozen=True)
class Shape:
  """A Transformer benchmark shape: vocabulary, widths, layers, and a batch of `batch` (source, target) pairs."""
  name: str
  vocab: int
  d_model: int
  heads: int
  d_ff: int
  layers: int
  batch: int
  source_length: int
  target_length: int

  def forward_flops(self) -> int:
    """Matmul FLOPs of one teacher-forced forward pass (`jformer.models.flops.forward_flops`, the paper's model)."""
    from jformer.models.flops import forward_flops

    return forward_flops(rows=self.batch, source_length=self.source_length, target_length=self.target_length,
                         d_model=self.d_model, d_ff=self.d_ff, vocab=self.vocab, encoder_layers=self.layers,
                         decoder_layers=self.layers)

  def train_flops(self) -> int:
    """A train step = 3 x forward (the backward pass is counted as twice the forward)."""
    return 3 * self.forward_flops()

  def model_config(self, **overrides):
    """The benchmark model: shared embeddings tied to the output, float32, dropout 0.1, positions up to the
    longest sequence."""
    from jformer.models.config import TransformerConfig

    values = dict(vocab_size=self.vocab, d_model=self.d_model, num_heads=self.heads, d_ff=self.d_ff,
                  num_encoder_layers=self.layers, num_decoder_layers=self.layers, dropout_rate=0.1,
                  max_length=max(self.source_length, self.target_length, 512), share_embeddings=True,
                  tie_output_embedding=True)
    values.update(overrides)
    return TransformerConfig(**values)

  def random_batch(self, seed: int = 0) -> dict:
    """Random token ids in [1, V): no padding."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {"inputs": rng.integers(1, self.vocab, (self.batch, self.source_length), dtype=np.int32),
            "targets": rng.integers(1, self.vocab, (self.batch, self.target_length), dtype=np.int32)}


TINY = Shape("TINY", vocab=8192, d_model=256, heads=4, d_ff=1024, layers=3, batch=32, source_length=64,
             target_length=64)
BASE = Shape("BASE", vocab=32768, d_model=512, heads=8, d_ff=2048, layers=6, batch=8, source_length=128,
             target_length=128)
SHAPES = {shape.name: shape for shape in (TINY, BASE)}


class CpuMeter:
  """Fraction of all CPU time used by other processes between `start()` and `stop()` (Linux /proc/stat): this
  process and the children it has reaped (a benchmarked command run as a subprocess) are its own."""

  def __init__(self):
    self._tick = os.sysconf("SC_CLK_TCK")
    self._begin = None

  def _read(self):
    try:
      with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
      return None
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    busy = total - fields[3] - fields[4]
    own = sum(os.times()[:4])  # user and system time, of this process and of its reaped children
    return total / self._tick, busy / self._tick, own

  def start(self):
    self._begin = self._read()

  def stop(self) -> float | None:
    end = self._read()
    if end is None or self._begin is None:
      return None
    total, busy, own = (b - a for a, b in zip(self._begin, end))
    return max(0.0, busy - own) / total if total > 0 else 0.0


@dataclasses.dataclass
class Timing:
  """Seconds per repetition and the other-process CPU fraction during each."""
  seconds: list
  disturbance: list

  @property
  def median(self) -> float:
    return statistics.median(self.seconds)

  @property
  def disturbed(self) -> int:
    return sum(1 for d in self.disturbance if d is not None and d > DISTURBED_ABOVE)

  def summary(self, scale: float = 1.0, digits: int = 2) -> dict:
    """median/min/max of `seconds * scale`, the disturbance per repetition and the disturbed count."""
    values = [s * scale for s in self.seconds]
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "reps": len(values),
            "other_cpu": [None if d is None else round(d, 3) for d in self.disturbance], "disturbed": self.disturbed}


def time_train_steps(step: Callable, state, batch, reps: int) -> tuple[float, Timing]:
  """(the first step's loss, the timing of `reps` steps after it) of a compiled train step `step(state, batch) ->
  (state, metrics)`, each step fed the state the one before returned."""
  holder = {"state": state}

  def run():
    holder["state"], metrics = step(holder["state"], batch)
    return metrics

  first_loss = float(run()["loss"])
  return first_loss, time_repeated(run, reps, warmup=0)


def time_repeated(fn: Callable[[], object], reps: int, warmup: int = 1) -> Timing:
  """Runs `fn` (which must block until its work is done) `warmup` times untimed, then `reps` times timed."""
  import jax

  if reps < 1:
    raise ValueError(f"reps must be >= 1, got {reps}")
  for _ in range(warmup):
    jax.block_until_ready(fn())
  meter, seconds, disturbance = CpuMeter(), [], []
  for _ in range(reps):
    meter.start()
    begin = time.perf_counter()
    jax.block_until_ready(fn())
    seconds.append(time.perf_counter() - begin)
    disturbance.append(meter.stop())
  return Timing(seconds, disturbance)


def time_in_rounds(fns: list[Callable[[], object]], reps: int, rounds: int = 2, warmup: int = 1) -> list[Timing]:
  """Times each of `fns` `reps` times in a row (after `warmup` untimed calls), the functions taking turns for
  `rounds` rounds: each function's timing spans the same minutes (this machine's speed drifts), while consecutive
  calls of one function keep its memory warm (alternating single calls of two programs slowed one of them by 45%
  here)."""
  timings = [Timing([], []) for _ in fns]
  for _ in range(rounds):
    for fn, timing in zip(fns, timings):
      block = time_repeated(fn, reps, warmup=warmup)
      timing.seconds.extend(block.seconds)
      timing.disturbance.extend(block.disturbance)
  return timings


PEAK_FLOPS = 2 * PEAK_SIZE**3


def peak_matmul(size: int = PEAK_SIZE, dtype: str = "float32") -> Callable[[], object]:
  """The peak probe: a compiled `dtype` size x size @ size x size matmul (2 size^3 FLOPs; PEAK_FLOPS by default),
  accumulated and returned in float32 (bfloat16: the fast path of `jformer.ops.matmul`), as a no-argument call."""
  import jax
  import jax.numpy as jnp

  a = jax.random.normal(jax.random.PRNGKey(0), (size, size)).astype(dtype)
  b = jax.random.normal(jax.random.PRNGKey(1), (size, size)).astype(dtype)
  matmul = jax.jit(lambda a, b: jnp.matmul(a, b, preferred_element_type=jnp.float32)).lower(a, b).compile()
  return lambda: matmul(a, b)


def matmul_peak(reps: int = 10, dtype: str = "float32") -> tuple[float, Timing]:
  """(median FLOP/s, timing) of the `dtype` peak probe."""
  timing = time_repeated(peak_matmul(dtype=dtype), reps, warmup=2)
  return PEAK_FLOPS / timing.median, timing


def time_interleaved(fn: Callable[[], object], probe: Callable[[], object], reps: int) -> tuple[Timing, Timing]:
  """Times `fn` and `probe` alternately (fn, probe, fn, probe, ...), after one untimed run of each, so that the
  peak that divides a step's FLOP/s is measured in the same minutes as the step (this machine's speed drifts)."""
  import jax

  for f in (fn, probe):
    jax.block_until_ready(f())
  return tuple(time_in_rounds([fn, probe], 1, rounds=reps, warmup=0))


def xla_flops(compiled) -> float | None:
  """FLOPs from `compiled.cost_analysis()` (XLA counts a while loop's body once, whatever its trip count)."""
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):
    analysis = analysis[0] if analysis else {}
  return (analysis or {}).get("flops")


def command_line(argv: list[str] | None = None) -> str:
  """The script (relative to the repository when inside it) and its arguments, shell-quoted:
  'benchmarks/train_step.py --variants=auto'."""
  argv = list(sys.argv if argv is None else argv)
  if argv:
    script = pathlib.Path(argv[0]).resolve()
    if script.is_relative_to(REPO):
      argv[0] = script.relative_to(REPO).as_posix()
  return shlex.join(argv)


def machine(argv: list[str] | None = None) -> dict:
  """The machine and software the figures come from, when, and from what (`jformer.provenance.machine`: the commit
  "-dirty" with changes besides benchmarks/results/, where the benchmarks write: a second benchmark run after a first
  is still the commit's code), and `command` (`command_line(argv)`)."""
  from jformer import provenance

  return {**provenance.machine(REPO, exclude=("benchmarks/results",)), "command": command_line(argv)}


def announce(argv: list[str] | None = None) -> dict:
  """Prints a line naming the machine and returns `machine(argv)`."""
  from jformer import provenance

  info = machine(argv)
  print(provenance.describe(info), flush=True)
  return info


def attention_label(variant: str, shape: Shape, dtype) -> str:
  """The variant name, with the kernel `auto` picks for the encoder's self-attention (padding as segment ids) at
  `shape`'s source length, e.g. 'auto (chunked)', 'auto (cudnn/pallas_gpu)' (cuDNN, or the second for batches
  that are not right padding)."""
  if variant != "auto":
    return variant
  import jax

  from jformer.attention import auto

  probe = jax.ShapeDtypeStruct((shape.batch, shape.source_length, shape.heads, shape.d_model // shape.heads), dtype)
  ids = jax.ShapeDtypeStruct((shape.batch, shape.source_length), "int32")
  choice = auto.choose(probe, probe, q_segment_ids=ids, kv_segment_ids=ids)
  return f"auto ({choice.kernel}{'' if choice.otherwise is None else '/' + choice.otherwise.kernel})"


def markdown_table(headers: list[str], rows: list[list]) -> str:
  lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers)))
           + "|"]
  lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
  return "\n".join(lines)


def write_json(path: str, payload: dict) -> None:
  if path:
    with open(path, "w") as f:
      json.dump(payload, f, indent=1)
    print(f"wrote {path}")


def add_common_arguments(parser, default_json: str) -> None:
  parser.add_argument("--reps", type=int, default=MIN_REPS, help=f"timed repetitions (median reported), >= {MIN_REPS}")
  parser.add_argument("--json", default=default_json, help="write the results here ('' = do not)")


DTYPES = ("float32", "bfloat16")


def add_dtypes_argument(parser) -> None:
  """`--dtypes`: the model compute dtypes (`model.dtype`) to measure, side by side in one run."""
  parser.add_argument("--dtypes", default="float32,bfloat16", help=f"comma-separated, from {DTYPES}")


def dtypes(parser, args) -> list[str]:
  chosen = args.dtypes.split(",")
  if not set(chosen) <= set(DTYPES):
    parser.error(f"unknown dtype(s) {sorted(set(chosen) - set(DTYPES))}; known: {DTYPES}")
  return chosen


def check_reps(parser, args) -> None:
  if args.reps < MIN_REPS:
    parser.error(f"--reps must be >= {MIN_REPS} (the medians need them)")
