"""Input pipeline throughput of the demo config against what its train step consumes, and the fraction of step
time the training loop spends waiting for input, with and without prefetching.

Stages of `jformer.data` as `jformer train --config=configs/demo.py` runs them, on the bundled corpus:
1. tokenize: `tokenize_pairs` over the whole training split (SentencePiece, both sides, length filter);
2. pack + batch: `train_dataset` (shuffle, first-fit packing into rows of 64 tokens, batches of data.batch_size
   rows), timed over `--batches` batches from a fresh iterator;
and the demo train step (configs/demo.py model and batch, jitted, donated) on those batches. Consumption
= real (non-padding) tokens per batch / step time; the ratio says how many times faster the pipeline delivers
than the step eats. The data is prepared and the SentencePiece model trained once into `--work_dir` (or the
model given with `--vocab`).

Input wait: `--steps` train steps as the training loop runs them (`next()` on a fresh `train_dataset` iterator
after one untimed batch, then the step, dispatched asynchronously; waited for once at the end), with
`--prefetch` batches built ahead in grain's background thread and without (0). Reported per repetition: total
seconds / steps, and the fraction of that time spent blocked in `next()`; median over `--reps`.

    python benchmarks/input_pipeline.py [--reps=5] [--vocab=runs/demo/vocab/spm_8000.model]
    python benchmarks/input_pipeline.py --reps=5 --steps=3 --batches=3 --json= --work_dir=/tmp/smoke \\
        --config.data.path=<folder of {train,valid,test}.{src,tgt}> --config.model.vocab_size=300 ...
(`--config.*` overrides change the demo config as on the `jformer train` command line, e.g. for a smoke run.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import common


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--vocab", default="", help="an existing SentencePiece model (default: train one)")
  parser.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "jformer_bench_pipeline"),
                      help="where the prepared tfds data and the SentencePiece model are kept between runs")
  parser.add_argument("--batches", type=int, default=100, help="batches per pack+batch repetition")
  parser.add_argument("--steps", type=int, default=50, help="train steps per input-wait repetition")
  parser.add_argument("--prefetch", type=int, default=2, help="batches prefetched in the input-wait comparison")
  common.add_common_arguments(parser, default_json="input_pipeline.json")
  args, rest = parser.parse_known_args(argv)
  common.check_reps(parser, args)
  args.overrides = {}
  for item in rest:
    key, sep, value = item.partition("=")
    if not key.startswith("--config.") or not sep:
      parser.error(f"unrecognised argument '{item}' (config overrides look like --config.model.d_model=32)")
    args.overrides[key[len("--config."):]] = value
  return args


def input_wait(step, state, batches, steps: int) -> tuple[float, float, object]:
  """Runs `steps` of `step(state, batch)` on `next(batches)` as the training loop does; returns (seconds in all,
  seconds blocked in `next()`, the final state). The first batch is taken before the clock starts."""
  import jax

  next(batches)
  waiting = 0.0
  start = time.perf_counter()
  for _ in range(steps):
    before = time.perf_counter()
    batch = next(batches)
    waiting += time.perf_counter() - before
    state, _ = step(state, batch)
  jax.block_until_ready(state)
  return time.perf_counter() - start, waiting, state


def main(argv=None):
  common.setup()
  args = parse_args(argv)

  import itertools

  import jax
  import numpy as np

  from jformer import config as config_lib, data, tasks
  from jformer.train import optim, state as state_lib, step as step_lib

  machine = common.announce()
  config = config_lib.load(os.path.join(os.path.dirname(__file__), "..", "configs", "demo.py"), args.overrides)
  split = lambda: data.load_split(config.data.dataset, "train", path=config.data.path,
                                  data_dir=os.path.join(args.work_dir, "tfds"))
  vocab = args.vocab or os.path.join(args.work_dir, "vocab", f"spm_{config.model.vocab_size}.model")
  tokenizer = data.get_tokenizer(vocab, lambda: data.pair_texts(split()), vocab_size=config.model.vocab_size,
                                 max_sentences=config.data.spm_max_sentences)
  texts = list(split())  # read once: the timing is of tokenizing, not of reading the corpus file.

  tokenized = {}

  def tokenize():
    tokenized["pairs"] = data.tokenize_pairs(texts, tokenizer, max_length=config.data.max_length)
    return None

  tokenize_timing = common.time_repeated(tokenize, args.reps)
  pairs = tokenized["pairs"]
  seeds = itertools.count()

  def pack_and_batch():
    batches = iter(data.train_dataset(pairs, batch_size=config.data.batch_size, max_length=config.data.max_length,
                                      seed=next(seeds)))
    tokenized["batches"] = [next(batches) for _ in range(args.batches)]
    return None

  pack_timing = common.time_repeated(pack_and_batch, args.reps)
  batches = tokenized["batches"]
  real_tokens_per_batch = float(np.mean([(b["inputs"] != 0).sum() + (b["targets"] != 0).sum() for b in batches]))
  # Packed rows number their examples 1, 2, ... (segmentation): a row's maximum is its example count.
  examples_per_batch = float(np.mean([b["inputs_segmentation"].max(axis=1).sum() for b in batches]))

  model = tasks.build_model(config)
  tx, schedule = optim.build_optimizer(config.optimizer, config.model.d_model)
  device_batches = [jax.tree.map(jax.numpy.asarray, b) for b in batches[:args.reps + 1]]
  state = state_lib.init_train_state(model, tx, jax.random.PRNGKey(0), device_batches[0])
  train_step = jax.jit(step_lib.make_train_step(model, tx, schedule, label_smoothing=config.train.label_smoothing),
                       donate_argnums=0)
  compiled = train_step.lower(state, device_batches[0]).compile()
  holder = {"state": state, "i": 0}

  def step():
    holder["state"], metrics = compiled(holder["state"], device_batches[holder["i"] % len(device_batches)])
    holder["i"] += 1
    return holder["state"], metrics

  step_timing = common.time_repeated(step, args.reps)

  waits, meter = {}, common.CpuMeter()
  for prefetch in (0, args.prefetch):
    step_s, fractions, disturbance = [], [], []
    for rep in range(args.reps):
      batches = iter(data.train_dataset(pairs, batch_size=config.data.batch_size, max_length=config.data.max_length,
                                        seed=rep, prefetch=prefetch))
      meter.start()
      seconds, waiting, holder["state"] = input_wait(compiled, holder["state"], batches, args.steps)
      disturbance.append(meter.stop())
      step_s.append(seconds / args.steps)
      fractions.append(waiting / seconds)
    waits[prefetch] = {"step_ms": round(statistics.median(step_s) * 1e3, 2),
                       "waiting_fraction": round(statistics.median(fractions), 4),
                       "waiting_fraction_min_max": [round(min(fractions), 4), round(max(fractions), 4)],
                       "disturbed": common.Timing(step_s, disturbance).disturbed}

  examples = len(pairs)
  tokenize_s = tokenize_timing.median
  pack_s_per_batch = pack_timing.median / args.batches
  step_s = step_timing.median
  pipeline_s_per_batch = tokenize_s * examples_per_batch / examples + pack_s_per_batch  # both stages, per batch.
  rows = [
      ["tokenize (whole split)", f"{examples / tokenize_s:,.0f}", f"{pairs.num_tokens() / tokenize_s:,.0f}",
       tokenize_timing.summary(1e3, 1)],
      ["pack + batch", f"{examples_per_batch / pack_s_per_batch:,.0f}",
       f"{real_tokens_per_batch / pack_s_per_batch:,.0f}", pack_timing.summary(1e3, 1)],
      ["pipeline (tokenize + pack + batch)", f"{examples_per_batch / pipeline_s_per_batch:,.0f}",
       f"{real_tokens_per_batch / pipeline_s_per_batch:,.0f}", None],
      ["demo train step consumes", f"{examples_per_batch / step_s:,.0f}", f"{real_tokens_per_batch / step_s:,.0f}",
       step_timing.summary(1e3, 1)],
  ]
  ratio = step_s / pipeline_s_per_batch
  print(common.markdown_table(
      ["stage", "examples/s", "tokens/s (non-padding)", "ms median (min-max)", "disturbed reps"],
      [[name, ex, tok, "-" if t is None else f"{t['median']} ({t['min']}-{t['max']})",
        "-" if t is None else f"{t['disturbed']}/{t['reps']}"] for name, ex, tok, t in rows]))
  print(f"{examples:,} training pairs, {examples_per_batch:.0f} examples and {real_tokens_per_batch:,.0f} real "
        f"tokens per {config.data.batch_size}x{config.data.max_length} batch; the pipeline delivers {ratio:.0f}x what "
        "the demo train step consumes")
  print(common.markdown_table(
      ["prefetch (batches)", f"ms per step ({args.steps} steps, median)", "time waiting in next() (median)",
       "min-max", "disturbed reps"],
      [[p, w["step_ms"], f"{w['waiting_fraction']:.1%}",
        f"{w['waiting_fraction_min_max'][0]:.1%}-{w['waiting_fraction_min_max'][1]:.1%}",
        f"{w['disturbed']}/{args.reps}"] for p, w in waits.items()]))
  common.write_json(args.json, {
      "benchmark": "input_pipeline", "machine": machine, "training_pairs": examples,
      "examples_per_batch": round(examples_per_batch, 1), "real_tokens_per_batch": round(real_tokens_per_batch),
      "rows": [{"stage": name, "examples_per_s": ex, "tokens_per_s": tok, "timing_ms": t} for name, ex, tok, t in rows],
      "pipeline_over_consumption": round(ratio, 1), "overrides": args.overrides, "steps": args.steps,
      "input_wait": {str(p): w for p, w in waits.items()}})


if __name__ == "__main__":
  main()
