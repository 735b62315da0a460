"""Peers: PyTorch's `torch.nn.Transformer` train step beside jformer's, on the same shapes, in one process.

The contenders (`--contenders`, default all), each one train step (forward, backward, optimizer update) on the
same random batch of `common.Shape.random_batch` (ids in [1, V): no padding, masks built all the same):
- `jformer-f32`, `jformer-bf16`: jformer's own step, `benchmarks/train_step.py`'s `step_runner` (jitted and
  donated, attention `auto`, `model.dtype` float32 or bfloat16 with float32 parameters and Adam state).
- `torch-eager-f32`, `torch-eager-bf16`: the model below in eager PyTorch, as a researcher would write it;
  bf16 = the forward under `torch.autocast("cpu", dtype=torch.bfloat16)` (parameters, gradients and AdamW state
  float32, the loss computed in float32), backward and optimizer outside it.
- `torch-compile-f32`, `torch-compile-bf16`: the same with `torch.compile(model)` (default mode, inductor: C++
  kernels built by the machine's compiler); the optimizer step stays eager. A contender that fails (to compile,
  or at any step) is a `failed` row with the error; a compiled row slower than its eager row says so.

The torch model: `nn.Transformer(d_model, nhead, num_encoder_layers = num_decoder_layers, dim_feedforward,
dropout=0.1, activation="relu", batch_first=True, norm_first=False)` (post-LN, as the paper), one `nn.Embedding`
shared by source, target and the output projection (logits = y E^T, tied), embeddings x sqrt(d_model) plus the
paper's sinusoids (sin at even features, cos at odd, as jformer's), dropout 0.1 on their sum, the decoder fed
the targets shifted right with 0 in front; a causal target mask (`tgt_is_causal=True`) and source, target and
memory key padding masks (boolean, from the ids != 0, all False here as jformer's segment ids are all 1);
cross-entropy with label smoothing 0.1 over the tokens != 0 (mean, as jformer's sum / count); AdamW(betas 0.9,
0.98, eps 1e-9, weight decay 0: jformer's `optax.adamw` with the paper's values) under the paper's learning-rate
schedule (eq. 3, jformer's warm-up steps) as a `LambdaLR`, its step included in the timed step; `loss.item()`
ends the step (torch on CPU is synchronous anyway). Embedding init normal(0, d^-1/2) as jformer's.

What differs from jformer's model (and why it cannot, or should not, be made equal):
- Parameters: `nn.MultiheadAttention` has a bias on the key projection (its `in_proj_bias` covers Q, K and V);
  jformer has none (q.(k + b) shifts a query's logits equally, which softmax ignores): d per attention, 3 N d in
  all. `nn.Transformer` always adds a final LayerNorm after the encoder and after the decoder, also post-LN
  (where each layer already ends in one): 4 d. So torch = jformer + 3 N d + 4 d (`parameter_counts`, checked by
  tests/test_benchmark_peers.py); both are printed. Kept as `nn.Transformer` builds them: its `bias=False` would
  drop every bias (and LayerNorm shift), not the key's alone, and the final norms go only by replacing its
  encoder and decoder (`custom_encoder`), which is no longer the stock module.
- Dropout: torch's one `dropout` also drops the attention weights and the feed-forward's ReLU output
  (tensor2tensor's attention/relu dropout); jformer's benchmark model drops only the residual sublayer outputs
  and the embeddings (the paper's "residual dropout"; `model.attention_dropout_rate` 0). torch does that
  elementwise work (and its random masks, e.g. [B, H, T, S] per attention) on top.
- Work outside the formula: jformer's step also computes accuracy, the gradient norm and finiteness checks (a
  skipped update when not finite); its output projection and loss run chunk by chunk (`linear_cross_entropy`),
  torch materialises [B, T, V] logits. The FLOPs of a row are the same matmul formula for both
  (`common.Shape.train_flops`), so MFU and tokens/s compare the same work.
- Process: both run in this one process, so torch runs under jformer's host allocator setting
  (`jformer.runtime.configure_host_allocator`: freed memory kept, no page faults per step), which helps torch's
  large temporaries too; `JFORMER_DEFAULT_ALLOCATOR=1` runs both with glibc's defaults. torch's intra-op threads
  = `--threads` (default: the CPUs this process may use; printed), XLA uses its own pool of all of them.

Timing (`common`'s rules): each contender is built and warmed up (2 untimed steps; the first step's seconds,
which include torch.compile's compilation, are kept as `first_step_s`, jformer's XLA compile as `compile_s`;
inductor caches its kernels on disk, so a second run compiles faster), then `--reps` rounds: one timed step of
each contender (the order rotated each round, so machine drift and cache effects hit all alike), then one of
each peak probe: JAX's 2048^3 matmul (256^3 with `--tiny`) in float32 and in bfloat16 (bf16 x bf16 -> f32) as in
the other benchmarks, and torch's `torch.mm` of the same size and dtypes for context. Step time = median
(min-max) of the rounds; tokens/s = batch x (source + target) / median; MFU = `Shape.train_flops` / median / the
JAX peak of the row's dtype (median of its runs between the steps), so within a dtype MFU ratios are tokens/s
ratios. "vs torch bf16" = tokens/s over the `torch-eager-bf16` row of the same shape.

Install torch (an optional extra, never a dependency of the package or of CI; 2.13.0 is a CPU build):

    .venv/bin/pip install -e '.[bench]'                    # or: .venv/bin/pip install torch==2.13.0
    .venv/bin/python benchmarks/peers.py                   # TINY and BASE, all contenders
    .venv/bin/python benchmarks/peers.py --shapes=TINY --reps=10 --contenders=jformer-bf16,torch-eager-bf16
    .venv/bin/python benchmarks/peers.py --tiny --json=''  # smoke run at toy sizes (below)

`--tiny` (shape TOY: vocab 512, d 64, 2 heads, d_ff 128, 1+1 layers, batch 2 x (16, 16)) takes about 30 s on 2
cores, plus about 40 s per compiled dtype while inductor's cache is cold: a smoke test, not figures. Every
contender of a shape is held at once (at BASE each torch one is about 1 GB of parameters, gradients and AdamW
state, besides jformer's two states and the steps' temporaries).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import time
import traceback

import common
import train_step

TOY = dataclasses.replace(common.TINY, name="TOY", vocab=512, d_model=64, heads=2, d_ff=128, layers=1, batch=2,
                          source_length=16, target_length=16)
TOY_PEAK_SIZE = 256
LABEL_SMOOTHING = 0.1
DROPOUT = 0.1
WARMUP = 2  # untimed steps of each contender before the rounds.


@dataclasses.dataclass(frozen=True)
class Contender:
  name: str
  framework: str  # "jformer" | "torch"
  mode: str  # "jit" (jformer) | "eager" | "compile" (torch)
  dtype: str  # "float32" | "bfloat16"


CONTENDERS = {c.name: c for c in (
    Contender("jformer-f32", "jformer", "jit", "float32"),
    Contender("jformer-bf16", "jformer", "jit", "bfloat16"),
    Contender("torch-eager-f32", "torch", "eager", "float32"),
    Contender("torch-eager-bf16", "torch", "eager", "bfloat16"),
    Contender("torch-compile-f32", "torch", "compile", "float32"),
    Contender("torch-compile-bf16", "torch", "compile", "bfloat16"))}
REFERENCE = "torch-eager-bf16"  # the "vs torch bf16" column divides by this row's tokens/s.


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shapes", default="TINY,BASE", help=f"comma-separated, from {sorted(common.SHAPES)}")
  parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"comma-separated, from {list(CONTENDERS)}")
  parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: the CPUs this process "
                      "may use)")
  parser.add_argument("--tiny", action="store_true", help=f"the toy shape {TOY.name} only, a {TOY_PEAK_SIZE}^3 peak "
                      "probe: a smoke test of this script, not figures")
  common.add_common_arguments(parser, default_json="peers.json")
  args = parser.parse_args(argv)
  common.check_reps(parser, args)
  args.contenders = args.contenders.split(",")
  unknown = [c for c in args.contenders if c not in CONTENDERS]
  if unknown:
    parser.error(f"unknown contender(s) {unknown}; known: {list(CONTENDERS)}")
  shapes = args.shapes.split(",")
  unknown = [s for s in shapes if s not in common.SHAPES]
  if unknown:
    parser.error(f"unknown shape(s) {unknown}; known: {sorted(common.SHAPES)}")
  args.shapes = [TOY] if args.tiny else [common.SHAPES[s] for s in shapes]
  return args


def import_torch():
  try:
    import torch
  except ImportError as e:
    raise SystemExit("benchmarks/peers.py needs torch: .venv/bin/pip install -e '.[bench]' (or torch==2.13.0, "
                     f"a CPU build): {e}")
  return torch


def sinusoids(length: int, dim: int):
  """The paper's table [length, dim]: sin at even features, cos at odd (jformer.ops.positional.sinusoidal's)."""
  torch = import_torch()
  position = torch.arange(length, dtype=torch.float64)[:, None]
  angles = position * 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
  table = torch.empty(length, dim, dtype=torch.float64)
  table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
  return table.float()


def torch_model(shape: common.Shape):
  """The torch model of `shape` (module doc): `model(inputs, targets)` = the label-smoothed loss, a scalar."""
  torch = import_torch()
  nn, F = torch.nn, torch.nn.functional

  class Seq2Seq(nn.Module):

    def __init__(self):
      super().__init__()
      d = shape.d_model
      self.embedding = nn.Embedding(shape.vocab, d)  # shared: source, target, output projection.
      nn.init.normal_(self.embedding.weight, std=d**-0.5)
      self.transformer = nn.Transformer(d_model=d, nhead=shape.heads, num_encoder_layers=shape.layers,
                                        num_decoder_layers=shape.layers, dim_feedforward=shape.d_ff,
                                        dropout=DROPOUT, activation="relu", batch_first=True, norm_first=False)
      self.dropout = nn.Dropout(DROPOUT)
      self.register_buffer("positions", sinusoids(max(shape.source_length, shape.target_length), d),
                           persistent=False)
      self.register_buffer("causal", torch.ones(shape.target_length, shape.target_length, dtype=torch.bool).triu(1),
                           persistent=False)  # True = may not attend (a future position).

    def embed(self, ids):
      return self.dropout(self.embedding(ids) * math.sqrt(self.embedding.embedding_dim)
                          + self.positions[:ids.shape[1]])

    def logits(self, inputs, targets):
      """Teacher-forced logits [B, T, V] of `targets` given `inputs` (int ids [B, S], [B, T]; 0 = padding)."""
      decoder_inputs = F.pad(targets, (1, 0))[:, :-1]  # shifted right, 0 (BOS) in front.
      source_padding, target_padding = inputs == 0, targets == 0
      hidden = self.transformer(self.embed(inputs), self.embed(decoder_inputs), tgt_mask=self.causal,
                                src_key_padding_mask=source_padding, tgt_key_padding_mask=target_padding,
                                memory_key_padding_mask=source_padding, tgt_is_causal=True)
      return F.linear(hidden, self.embedding.weight)  # tied: y E^T.

    def forward(self, inputs, targets):
      logits = self.logits(inputs, targets)
      return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=0,
                             label_smoothing=LABEL_SMOOTHING)

  return Seq2Seq()


def parameter_counts(shape: common.Shape) -> dict:
  """Parameters of jformer's benchmark model and of the torch model of `shape`, and what torch has on top
  (module doc): a key-projection bias per attention (N encoder + 2 N decoder attentions), the final encoder and
  decoder LayerNorms (scale and bias each). torch == jformer + sum(torch_extra)."""
  from jformer.models import Transformer, summary

  jformer = summary.count_by_module(summary.param_shapes(Transformer(shape.model_config())))["total"]
  torch_count = sum(p.numel() for p in torch_model(shape).parameters())
  extra = {"key biases": 3 * shape.layers * shape.d_model, "final LayerNorms": 2 * 2 * shape.d_model}
  return {"jformer": jformer, "torch": torch_count, "torch_extra": extra}


def paper_learning_rate(d_model: int):
  """eq. 3 as a `LambdaLR` factor of the update count (0-based), jformer's `optim.paper_schedule` values."""
  from jformer import config as config_lib

  warmup = config_lib.base_config().optimizer.warmup_steps
  return lambda count: d_model**-0.5 * min((count + 1) ** -0.5, (count + 1) * warmup**-1.5)


def torch_runner(shape: common.Shape, contender: Contender, batch: dict):
  """`run()`: one train step of the torch contender on `batch` (numpy ids), returning the loss as a float."""
  torch = import_torch()

  torch.manual_seed(0)
  model = torch_model(shape).train()
  module = torch.compile(model) if contender.mode == "compile" else model
  optimizer = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
  schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, paper_learning_rate(shape.d_model))
  inputs, targets = (torch.from_numpy(batch[key]).long() for key in ("inputs", "targets"))
  bf16 = contender.dtype == "bfloat16"

  def run():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
      loss = module(inputs, targets)
    loss.backward()
    optimizer.step()
    schedule.step()
    return loss.item()

  return run


def build(shape: common.Shape, contender: Contender) -> tuple:
  """(run, info): a contender's step, built and warmed up; info has build/compile seconds and a note."""
  import jax

  begin = time.perf_counter()
  if contender.framework == "jformer":
    run, _, model_config = train_step.step_runner(shape, "auto", dtype=jax.numpy.dtype(contender.dtype))
    info = {"compile_s": round(time.perf_counter() - begin, 1),
            "note": f"attention {common.attention_label('auto', shape, model_config.dtype)}"}
  else:
    run = torch_runner(shape, contender, shape.random_batch())
    info = {"note": "autocast" if contender.dtype == "bfloat16" else ""}
  begin = time.perf_counter()
  jax.block_until_ready(run())
  info["first_step_s"] = round(time.perf_counter() - begin, 2)
  for _ in range(WARMUP - 1):
    jax.block_until_ready(run())
  return run, info


def peak_probes(dtypes: list[str], size: int) -> dict:
  """{(framework, dtype): no-argument call of a size^3 matmul}: JAX's (common.peak_matmul, the MFU denominator)
  and torch.mm's (for context) in each of `dtypes`."""
  torch = import_torch()
  probes = {}
  for dtype in dtypes:
    probes[("jax", dtype)] = common.peak_matmul(size, dtype)
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator).to(getattr(torch, dtype)) for _ in range(2))
    probes[("torch", dtype)] = lambda a=a, b=b: torch.mm(a, b)
  return probes


def measure_shape(shape: common.Shape, contenders: list[Contender], reps: int, peak_size: int) -> tuple:
  """(rows, peaks) of one shape: every contender built, then `reps` rounds (module doc)."""
  import jax

  runs, rows = {}, {}
  for contender in contenders:
    row = {"shape": shape.name, "contender": contender.name, "framework": contender.framework,
           "mode": contender.mode, "dtype": contender.dtype}
    print(f"{shape.name} {contender.name}: building and warming up", flush=True)
    try:
      runs[contender.name], info = build(shape, contender)
      row.update(status="ok", **info)
    except Exception as e:  # noqa: BLE001 - a contender that cannot run is a failed row, with its reason.
      row.update(status="failed", reason=failure(e))
      print(f"{shape.name} {contender.name} failed: {row['reason']}", flush=True)
    rows[contender.name] = row
  probes = peak_probes(sorted({c.dtype for c in contenders}, key=common.DTYPES.index), peak_size)
  for probe in probes.values():
    jax.block_until_ready(probe())
  timings = {name: common.Timing([], []) for name in runs}
  peak_timings = {key: common.Timing([], []) for key in probes}
  for round_ in range(reps):
    names = list(runs)
    names = names[round_ % len(names):] + names[:round_ % len(names)] if names else []
    for name in names:
      try:
        one = common.time_repeated(runs[name], 1, warmup=0)
      except Exception as e:  # noqa: BLE001
        rows[name].update(status="failed", reason=f"at timed round {round_}: {failure(e)}")
        del runs[name], timings[name]
        continue
      timings[name].seconds += one.seconds
      timings[name].disturbance += one.disturbance
    for key, probe in probes.items():
      one = common.time_repeated(probe, 1, warmup=0)
      peak_timings[key].seconds += one.seconds
      peak_timings[key].disturbance += one.disturbance
  peak_flops = 2 * peak_size**3
  peaks = {f"{framework} {dtype}": {"gflop_per_s": round(peak_flops / timing.median / 1e9, 1),
                                    "ms": timing.summary(1e3)}
           for (framework, dtype), timing in peak_timings.items()}
  tokens = shape.batch * (shape.source_length + shape.target_length)
  for name, timing in timings.items():
    row = rows[name]
    peak = peak_flops / peak_timings[("jax", row["dtype"])].median
    row.update(step_ms=timing.summary(1e3, 1), tokens_per_s=round(tokens / timing.median),
               model_gflop=round(shape.train_flops() / 1e9, 2),
               model_gflop_per_s=round(shape.train_flops() / timing.median / 1e9, 1),
               peak_gflop_per_s=round(peak / 1e9, 1), mfu=round(shape.train_flops() / timing.median / peak, 3))
  compare(rows)
  return list(rows.values()), peaks


def failure(e: BaseException) -> str:
  """The error's type and first line, and where it was raised (the innermost frame)."""
  lines = str(e).strip().splitlines() or [""]
  frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
  where = f" ({os.path.basename(frame.filename)}:{frame.lineno})" if frame else ""
  return f"{type(e).__name__}: {lines[0][:300]}{where}"


def compare(rows: dict) -> None:
  """Adds `vs_torch_bf16` (tokens/s over the REFERENCE row's) to measured rows, and to a compiled torch row
  `vs_eager` and, when below 1, 'slower than eager' in its note."""
  reference = rows.get(REFERENCE, {}).get("tokens_per_s")
  for name, row in rows.items():
    if "tokens_per_s" not in row:
      continue
    row["vs_torch_bf16"] = round(row["tokens_per_s"] / reference, 2) if reference else None
    eager = rows.get(name.replace("compile", "eager"), {}).get("tokens_per_s") if row["mode"] == "compile" else None
    if eager:
      row["vs_eager"] = round(row["tokens_per_s"] / eager, 2)
      verdict = "slower than eager" if row["vs_eager"] < 1 else "faster than eager"
      row["note"] = "; ".join(filter(None, [row.get("note"), f"{verdict} ({row['vs_eager']}x)"]))


def table(rows: list[dict]) -> str:
  def cells(r):
    if r["status"] != "ok":
      return [r["shape"], r["framework"], r["mode"], r["dtype"], "failed", "-", "-", "-", "-", r["reason"]]
    step = r["step_ms"]
    if "compile_s" in r:
      first = f"XLA compile {r['compile_s']} s"
    else:
      first = f"{'compile (first step)' if r['mode'] == 'compile' else 'first step'} {r['first_step_s']} s"
    return [r["shape"], r["framework"], r["mode"], r["dtype"], f"{step['median']} ({step['min']}-{step['max']})",
            f"{r['tokens_per_s']:,}", "-" if r.get("vs_torch_bf16") is None else f"{r['vs_torch_bf16']:.2f}x",
            f"{100 * r['mfu']:.1f}%", f"{step['disturbed']}/{step['reps']}",
            "; ".join(filter(None, [r.get("note"), first]))]

  return common.markdown_table(["shape", "framework", "mode", "dtype", "step ms median (min-max)", "tokens/s",
                                "vs torch bf16", "CPU MFU", "disturbed reps", "note"], [cells(r) for r in rows])


def main(argv=None):
  common.setup()
  args = parse_args(argv)
  torch = import_torch()
  import jax

  machine = {**common.announce(None if argv is None else [__file__, *argv]), "torch": torch.__version__}
  threads = args.threads or machine["cpus"]
  torch.set_num_threads(threads)
  machine["torch_threads"] = torch.get_num_threads()
  print(f"torch {torch.__version__}: {machine['torch_threads']} intra-op threads; jax {jax.__version__}: XLA's own "
        f"pool; commit {machine['commit']}", flush=True)
  contenders = [CONTENDERS[name] for name in args.contenders]
  peak_size = TOY_PEAK_SIZE if args.tiny else common.PEAK_SIZE
  rows, peaks, parameters = [], {}, {}
  for shape in args.shapes:
    counts = parameters[shape.name] = parameter_counts(shape)
    print(f"{shape.name} parameters: jformer {counts['jformer']:,}, torch {counts['torch']:,} (+ "
          + ", ".join(f"{k} {v:,}" for k, v in counts["torch_extra"].items()) + ")", flush=True)
    shape_rows, peaks[shape.name] = measure_shape(shape, contenders, args.reps, peak_size)
    rows += shape_rows
    print(f"{shape.name} peaks ({peak_size}^3 matmul, median GFLOP/s between the steps): "
          + ", ".join(f"{k} {v['gflop_per_s']}" for k, v in peaks[shape.name].items())
          + " (MFU divides by JAX's of the row's dtype)", flush=True)
  printed = table(rows)
  print(printed)
  common.write_json(args.json, {"benchmark": "peers", "tiny": args.tiny, "machine": machine,
                                "peak_size": peak_size, "peaks": peaks, "parameters": parameters, "rows": rows,
                                "table": printed})
  return rows


if __name__ == "__main__":
  main()
