"""Regenerates every page under docs/results/ from the JSON in the repository.

    python docs/results/generate.py            # (re)write the pages
    python docs/results/generate.py --check    # write nothing; exit 1 naming the stale pages
    python docs/results/generate.py --out=DIR  # write the pages into DIR instead (tests/test_results_pages.py)

Sources: `benchmarks/results/*.json`, one page per benchmark kind (the file's `benchmark` key; several files of a
kind share its page, in file-name order), and `docs/results/support.json` (support.md). `README.md` here is the
index. Every table says where it was measured: the date, commit, machine, software and command of its file's
`machine` block. A file's findings name the rows they rest on and their seeds (`findings.py` beside this script
checks their numbers; `--check` fails on a finding its file does not support), and a reduced run says so in its
page's first line. The output depends on the JSON alone (files in sorted order, fixed number formats), so `--check`
is stable. Standard library only: no JAX needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import re
import sys
from typing import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import findings  # noqa: E402  (docs/results/findings.py, beside this script)

REPO = pathlib.Path(__file__).resolve().parents[2]
RESULTS = "benchmarks/results"
PAGES_DIR = "docs/results"
SUPPORT = f"{PAGES_DIR}/support.json"
BOARD = f"{PAGES_DIR}/report_cards"  # the leaderboard's rows (`jformer report-card --leaderboard`), board.json
COMMAND = "python docs/results/generate.py"
# The statuses a support-matrix cell may have, and what each means (the legend of support.md).
STATUSES = {
    "tested in CI": "a test under `tests/` runs it in CI (`.ci/run`: a fresh clone on 2 CPU cores, no GPU, the "
                    "default suite then the slow tests); the cell names the test file",
    "measured once by hand": "run once by hand with a benchmark script on that hardware, its result kept in the "
                             "named JSON; not part of any automatic check",
    "untested": "nothing in this repository shows it running there",
}
PLATFORMS = ("CPU", "GPU", "TPU")


# ---------------------------------------------------------------------------------------------------------------
# Formatting.

def fixed(x, digits: int) -> str:
  """`x` with `digits` decimals and thousands separators; '-' for None."""
  return "-" if x is None else f"{x:,.{digits}f}"


def percent(x) -> str:
  return "-" if x is None else f"{100 * x:.1f}%"


def timing(t: dict | None, digits: int) -> str:
  """A `common.Timing.summary()`: 'median (min-max)'; the median alone where a transcribed run printed only it."""
  if t is None:
    return "-"
  if "min" not in t:
    return f"{t['median']:.{digits}f}"
  return f"{t['median']:.{digits}f} ({t['min']:.{digits}f}-{t['max']:.{digits}f})"


def disturbed(t: dict | None) -> str:
  """'disturbed/reps' of a timing summary ('-' where not counted)."""
  return "-" if t is None or "disturbed" not in t else f"{t['disturbed']}/{t['reps']}"


def count(x) -> str:
  """An integer with thousands separators; strings (older files stored them formatted) as they are."""
  if x is None:
    return "-"
  return x if isinstance(x, str) else f"{x:,}"


def cell(x) -> str:
  return str(x).replace("|", "\\|").replace("\n", " ")


def table(headers: list[str], rows: list[list], numeric: str = "") -> str:
  """A Markdown table; columns whose letter in `numeric` is 'r' are right-aligned (e.g. 'lllrrr')."""
  align = ["---:" if numeric[i:i + 1] == "r" else "---" for i in range(len(headers))]
  lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
  lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
  return "\n".join(lines)


def paragraphs(*texts: str) -> str:
  return "\n\n".join(t.strip("\n") for t in texts if t)


# ---------------------------------------------------------------------------------------------------------------
# Where a table was measured.

def machine_line(m: dict) -> str:
  flags = m.get("cpu_flags") or "not recorded"
  host = f"{m['cpu']}, {m['cpus']} CPU cores, flags: {flags}"
  if m.get("backend", "cpu") == "cpu":
    return f"{host} (JAX backend cpu)"
  return f"{m['device']} (JAX backend {m['backend']}); host {host}"


def commit_line(m: dict) -> str:
  commit = m.get("commit", "not recorded")
  if m.get("commit_is") == "recorded":
    return (f"recorded at `{commit}` (the commit that recorded this file; the commit the run measured was not "
            "recorded)")
  return f"measured at `{commit}`" + (" (uncommitted changes in the tree)" if commit.endswith("-dirty") else "")


def command_of(m: dict) -> str:
  """The recorded command, as one would type it (a benchmark script runs under `python`)."""
  command = m.get("command", "not recorded")
  return f"python {command}" if command.startswith("benchmarks/") else command


def provenance(path: str, data: dict) -> str:
  """The 'where, when, what' list above each table."""
  m = data["machine"]
  software = f"jax {m['jax']}, jaxlib {m['jaxlib']}, flax {m['flax']}, Python {m['python']}"
  lines = [f"- data: [`{path}`](../../{path})",
           f"- date: {m['date']}",
           f"- commit: {commit_line(m)}",
           f"- machine: {machine_line(m)}",
           f"- software: {software}",
           f"- command: `{command_of(m)}`"]
  if m.get("added_by_hand"):
    lines.append(f"- provenance: {m['added_by_hand']}")
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Pages. Each renders one JSON file of its kind into a section; the fixed text says what the columns mean.

TIMING_RULES = """\
Timing rules of every benchmark (`benchmarks/common.py`): compile and warm up first, wait with
`jax.block_until_ready`, at least 5 timed repetitions (unless a table says otherwise), reported as median (min-max).
For each repetition the share of all CPU time that *other* processes used is read from /proc/stat; a repetition
above 10% counts as disturbed (`disturbed reps` = disturbed / timed)."""


def train_step_section(path: str, data: dict) -> str:
  rows = data["rows"]
  float32 = {(r["shape"], r["attention"]): r for r in rows if r.get("dtype") == "float32"}

  def speedup(r):
    base = float32.get((r["shape"], r["attention"]))
    if r.get("dtype") in (None, "float32") or base is None:
      return "-"
    return f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x"

  body = table(
      ["shape", "dtype", "attention", "step ms median (min-max)", "tokens/s", "x f32 tokens/s", "model GFLOP",
       "XLA GFLOP", "model GFLOP/s", "peak GFLOP/s (row's dtype)", "CPU MFU", "of the f32 peak", "disturbed reps"],
      [[r["shape"], r.get("dtype", "-"), r["attention"], timing(r["step_ms"], 1), count(r["tokens_per_s"]),
        speedup(r), fixed(r["model_gflop"], 1), fixed(r["xla_gflop"], 1), fixed(r["model_gflop_per_s"], 1),
        fixed(r["peak_gflop_per_s"], 1), percent(r["mfu"]), percent(r.get("mfu_of_float32_peak")),
        disturbed(r["step_ms"])] for r in rows], "lllrrrrrrrrrr")
  peak = (f"float32 peak at the start of the run: {fixed(data['peak_gflop_per_s'], 1)} GFLOP/s (median of "
          f"{data['peak']['reps']}); each row's peak is the one timed between its own steps.")
  if any("dtype" not in r for r in rows):
    peak += (" Rows without a dtype come from a run that predates `--dtypes`: it measured the model's default, "
             "float32.")
  skipped = "\n".join(f"- skipped {s['shape']} `{s['attention']}`: {s['skipped']}" for s in data.get("skipped", []))
  return paragraphs(provenance(path, data), peak, body, skipped)


TRAIN_STEP_INTRO = """\
`benchmarks/train_step.py` times the jitted, donated train step of each shape, dtype and attention variant:
paper Adam, label smoothing 0.1, dropout 0.1, embeddings shared by source and target and tied to the output;
parameters and Adam state float32 in every dtype (`model.dtype` is the compute dtype).

- TINY = vocab 8192, d_model 256, 4 heads, d_ff 1024, 3+3 layers, batch 32 x (64, 64) tokens; BASE = the paper's
  base model with vocab 32768, batch 8 x (128, 128) (`TINY`, `BASE` in `benchmarks/common.py`). Random token ids,
  no padding.
- tokens = source + target tokens of a batch; tokens/s = tokens / median step time; x f32 tokens/s = this row's
  tokens/s over the float32 row of the same shape and attention.
- model GFLOP: matrix products only, 2 FLOPs per multiply-add, full attention counted, a train step = 3 x the
  forward pass (`common.Shape.forward_flops` has the formula). XLA GFLOP: `compiled.cost_analysis()`, which
  counts a loop body once, so it misses all but one chunk of the chunked output projection and loss.
- peak: median FLOP/s of a jitted 2048x2048 @ 2048x2048 matmul in the row's dtype (bfloat16 operands with a
  float32 result, XLA:CPU's fast path) in the same process, timed alternately with the row's steps (the machine's
  speed drifts from minute to minute). CPU MFU = model FLOP/s / that peak. of the f32 peak = model FLOP/s / the
  float32 peak measured at the start of the run (above 100% where bfloat16 beats the float32 peak).
- `auto (x)`: the kernel `auto` picked for the encoder's self-attention at that shape.
"""

CAPTIONS = {
    "demo.json": "README command 1 at the current code, alone on a 2-core AMD EPYC without AVX-512 VP2INTERSECT (the "
                 "slower VMs of its kind).",
    "demo_faster_vm.json": "The same command on a faster VM of the kind (with AVX-512 VP2INTERSECT and AVX-VNNI), "
                           "before `train.keep_best`: it was demo.json until the run above.",
    "train_step.json": "The default attention (`auto`), float32 and bfloat16.",
    "train_step_similarity.json": "The similarity-function variants at TINY (the paper's Sec. 3.2.1 comparison).",
    "attention_similarity.json": "The similarity functions on the chunked engine against `chunked` and the dense "
                                 "reference, at 2048 tokens.",
    "profile_step.json": "After issue 29's changes (the current code); compare `profile_step_before_29.json`.",
    "profile_step_before_29.json": "Before issue 29's changes (4a2669f), traced in the same session as "
                                   "`profile_step.json`, the one after the other.",
    "profile_step_zen5.json": "The TINY step at b6ecba2 on the machine of `peers_zen5.json` (AMD EPYC, CPU family "
                              "26, Zen 5), traced in the same session as that table.",
    "profile_step_base_zen5.json": "The BASE bfloat16 step on the same machine and commit as "
                                   "`profile_step_zen5.json`: the matmul kinds alone take about 600 ms, while 1.5x "
                                   "torch's bfloat16 autocast step in `peers_zen5.json` (1,072 ms) would be 715 ms.",
    "peers.json": "After issue 29's changes (measured at 3763416); the record before them is `peers_before_29.json`.",
    "peers_before_29.json": "Before issue 29's changes to the train step (ce0eae5), for comparison: another session, "
                            "so compare each row's ratio to torch rather than its tokens/s.",
    "peers_zen5.json": "The same command on another machine of the project's kind, at b6ecba2 (the train step as "
                       "`peers.json` measured it, dropout's scaling rounded once since): an AMD EPYC of CPU family 26 "
                       "(Zen 5, by `lscpu`; its flags add avx512_vp2intersect and avx_vnni), whose XLA float32 "
                       "2048^3 matmul runs at about twice torch's. Compare the ratios, not the tokens/s, with "
                       "`peers.json`.",
    "decode_flax_example.json": "Beside the Flax WMT example (`--flax-example`): its own models.py and decode.py "
                                "from flax 0.12.8's source release, the TINY shape in its TransformerConfig (shared, "
                                "tied embeddings, no dropout), its `predict_step` as its train.py writes it; "
                                "`greedy` is its beam search with one beam (it has no other). jformer's and the "
                                "example's decoding of one dtype and method take turns of 5 calls, two rounds "
                                "(`common.time_in_rounds`).",
    "attention_flex.json": "Flex variants (`jformer.attention.flex`) beside the hand-written paths, causal, at 2,048 "
                           "and 8,192 tokens: `flex_alibi` (ALiBi as a score_mod, evaluated on each block) beside "
                           "`chunked+alibi` (the `alibi` encoding's bias `[1, H, T, S]` given to `chunked`), "
                           "`flex_window` (a window of 128 as a mask_mod function, evaluated on the blocks it partly "
                           "masks) beside `local` (the window as data); `dot_product` and `dot_product+alibi` are the "
                           "dense references. x beside = the flex row over its hand-written path.",
    "attention_window.json": "A sliding window as data: `local` with a window of 128 (run by `auto` on CPU as "
                             "`chunked` with `window=(127, 127)`, skipping the blocks outside it) against `chunked` "
                             "without a window and the dense reference, causal, at 2,048 and 8,192 tokens.",
}


def decode_section(path: str, data: dict) -> str:
  shape = (f"{data['shape']} model, batch {data['batch']}, source length {data['source_length']}, {data['steps']} "
           "decode steps.")
  peers = any("framework" in r for r in data["rows"])  # rows of `--flax-example`: the framework and the ratio.
  body = table(["dtype"] + ["framework"] * peers + ["method", "ms per call median (min-max)", "output tokens",
                                                    "output tokens/s", "ms per step"]
               + ["jformer / flax example"] * peers + ["disturbed reps"],
               [[r["dtype"]] + [r.get("framework")] * peers
                + [r["method"], timing(r["decode_ms"], 1), count(r["output_tokens"]), count(r["tokens_per_s"]),
                   fixed(r["ms_per_step"], 2)]
                + [f"{r['vs_flax_example']:.2f}x" if "vs_flax_example" in r else "-"] * peers
                + [disturbed(r["decode_ms"])] for r in data["rows"]], "l" + "l" * peers + "lrrrr" + "r" * peers + "r")
  states = data.get("state_rows")
  if not states:
    return paragraphs(provenance(path, data), shape, body)
  state_body = table(["variant", "generated length", "cache MiB (batch 8)", "ms per step median (min-max)",
                      "disturbed reps"],
                     [[r["variant"] + "".join(f", {k} {v}" for k, v in r["options"].items()), count(r["length"]),
                       fixed(r["cache_mib"], 2), timing(r["step_ms"], 2), disturbed(r["step_ms"])]
                      for r in states], "lrrrr")
  return paragraphs(provenance(path, data), shape, body, DECODE_STATE_TEXT, state_body)


DECODE_STATE_TEXT = """What each variant keeps between decode steps (`jformer.attention.decode_state`), against the generated length:
the LM demo's model (decoder-only, d_model 256, 4 layers, rotary positions, random weights), batch 8; its whole
decode cache after that many positions, and one decode step there."""


DECODE_INTRO = """\
`benchmarks/decode.py`: beam search (beam 4, length penalty alpha 0.6) and greedy search with the KV cache,
jformer's own decoders (the calls `translate_ids` makes), one jitted function per method (encoder, cache and
search loop). Random weights and random source ids; EOS is unreachable (its logit is -1e9 at every step, the
decoders force it as the last token), so every row and beam runs every step. Output tokens = batch x steps;
output tokens/s = output tokens / median ms per call; ms per step = ms per call / steps. Parameters float32,
`model.dtype` as the row says.
"""


def memory_section(path: str, data: dict) -> str:
  body = table(["attention", "L", "temp GiB", "arguments GiB", "outputs GiB", "compile s", "step s (run once)",
                "loss", "max RSS GiB"],
               [[r["attention"], r["length"], fixed(r["temp_gib"], 3), fixed(r["arguments_gib"], 3),
                 fixed(r["outputs_gib"], 3), fixed(r["compile_s"], 1), fixed(r["step_s"], 1),
                 fixed(r.get("loss"), 3), fixed(r.get("max_rss_gib"), 2)] for r in data["rows"]],
               "lrrrrrrrr")
  return paragraphs(provenance(path, data), f"Shape: {data['shape']}.", body)


MEMORY_INTRO = """\
`benchmarks/memory.py`: `compiled.memory_analysis()` of the jitted, donated BASE train step at batch 1 (dropout
0.1, paper Adam, the default `model.remat="auto"`: layers rematerialized from 1024 tokens), source = target = L
tokens, per attention variant. temp = XLA's temporary bytes (activations kept for the backward pass, gradients,
scratch) besides the arguments (parameters and Adam moments) and the outputs (as much again). step s: the default
attention's step at the script's `--run_lengths`, run once after a warm-up run, to show that it fits; loss and
max RSS (the process's peak resident memory) come from that run; '-' where the step was only compiled.
"""


def context_parallel_section(path: str, data: dict) -> str:
  base = data["rows"][0]["temp_gib"]
  body = table(["strategy", "sequence axis", "tokens per device", "temp GiB per device", "x one device",
                "arguments GiB", "step s, median (min-max)", "disturbed reps"],
               [[r["strategy"], r["sequence"], count(r["tokens_per_device"]), fixed(r["temp_gib"], 3),
                 fixed(r["temp_gib"] / base, 2), fixed(r["arguments_gib"], 3), timing(r["step_s"], 2),
                 disturbed(r["step_s"])] for r in data["rows"]],
               "llrrrrrr")
  return paragraphs(provenance(path, data), f"Model: {data['model']}.", body)


CONTEXT_PARALLEL_INTRO = """`benchmarks/context_parallel.py`: the train step of `configs/lm_long.py` (one row of 16,384 tokens) on a mesh whose
sequence axis has n devices (`parallel.sequence`), each holding 16,384 / n tokens of the row through the model, with
attention over the split row by `parallel.context_strategy` (`jformer/attention/context_parallel.py`): `gather`
(keys and values gathered) or `ring` (key/value blocks passed around the axis; the causal row in the load-balanced
order for both). `compiled.memory_analysis()` of the compiled step, not run: temp = XLA's temporary bytes per
device (activations kept for the backward pass, gradients, scratch), arguments = the state and batch it takes;
properties of the program, the same on every run. x one device: temp against n = 1. Step seconds, where the table
has them: the script's `--time` run, gather and ring timed in turns in one process; on simulated CPU devices the n
devices share the machine's cores, so they compare the strategies' work, not a speed-up.
"""


def input_pipeline_section(path: str, data: dict) -> str:
  facts = (f"{data['training_pairs']:,} training pairs; a batch holds {data['examples_per_batch']:.1f} examples "
           f"and {data['real_tokens_per_batch']:,} real tokens.")
  if data.get("overrides"):
    overrides = " ".join(f"--config.{key}={value}" for key, value in sorted(data["overrides"].items()))
    facts += f" Config overrides: `{overrides}`."
  body = table(["stage", "examples/s", "real tokens/s", "ms median (min-max)", "disturbed reps"],
               [[r["stage"], count(r["examples_per_s"]), count(r["tokens_per_s"]), timing(r["timing_ms"], 1),
                 disturbed(r["timing_ms"])] for r in data["rows"]], "lrrrr")
  ratio = (f"The pipeline delivers {data['pipeline_over_consumption']:.1f}x the real tokens per second that the "
           "demo train step consumes.")
  wait = ""
  if data.get("input_wait"):
    steps = data.get("steps", "?")
    wait = table(["prefetch (batches)", f"ms per step ({steps} steps, median)", "time waiting in next() (median)",
                  "min-max", "disturbed reps"],
                 [[p, fixed(w["step_ms"], 2), percent(w["waiting_fraction"]),
                   f"{percent(w['waiting_fraction_min_max'][0])}-{percent(w['waiting_fraction_min_max'][1])}",
                   str(w["disturbed"])]
                  for p, w in sorted(data["input_wait"].items(), key=lambda kv: int(kv[0]))], "rrrrr")
  return paragraphs(provenance(path, data), facts, body, ratio, wait)


INPUT_PIPELINE_INTRO = """\
`benchmarks/input_pipeline.py`: the stages of `jformer.data` as `jformer train --config=configs/demo.py` runs
them, on the bundled corpus, with the demo config of the file's commit (it changes over time). tokenize = `tokenize_pairs` over the whole training split (SentencePiece, both sides,
length filter); pack + batch = `train_dataset` (shuffle, first-fit packing into rows, batches of
`data.batch_size` rows), timed over a number of batches from a fresh iterator; pipeline = both, per batch; the
demo train step (the demo's model and batch, jitted, donated) on those batches. Real tokens = non-padding tokens;
consumption = real tokens per batch / step time. Input wait (in files that have it): train steps as the training
loop runs them, with and without batches prefetched in grain's background thread, and the share of the time
spent blocked in `next()`.
"""


def attention_section(path: str, data: dict) -> str:
  rows = data["rows"]
  at = {(r["variant"], r["length"]): r for r in rows}
  beside = any("beside" in r for r in rows)  # flex rows timed beside a hand-written path (`BESIDE` of the script)

  def ratio(r, key, digits, of="dot_product"):
    ref = at.get((of, r["length"]))
    if not ref or not ref.get(key) or not r.get(key) or r["status"] != "ok" or ref["status"] != "ok":
      return "-"
    return f"{r[key] / ref[key]:.{digits}f}"

  def ms(r, key):
    return "OOM (not run)" if r["status"] == "OOM" and key == "ms" else fixed(r.get(key), 2)

  options = {k: v for k, v in sorted(data.get("options", {}).items()) if v}
  facts = (f"Backend {data['backend']}, batch {data['batch']}, {data['heads']} heads, head_dim {data['head_dim']}, "
           "causal self-attention, float32; options beyond each variant's defaults: "
           + (json.dumps(options, sort_keys=True) if options else "none") + ".")
  hand_written = ["beside", "x beside time", "x beside memory"] if beside else []
  body = table(["variant", "length", "fwd+bwd ms (median)", "min ms", "x ref time", "temp MiB", "x ref memory"]
               + hand_written + ["compile s"],
               [[r["variant"], r["length"], ms(r, "ms"), ms(r, "min_ms"), ratio(r, "ms", 2),
                 fixed(r["temp_mib"], 1), ratio(r, "temp_mib", 3)]
                + ([r.get("beside", "-"), ratio(r, "ms", 2, r.get("beside")), ratio(r, "temp_mib", 3, r.get("beside"))]
                   if beside else [])
                + [fixed(r["compile_s"], 2)] for r in rows],
               "lrrrrrr" + "lrr" * beside + "r")
  reps = re.search(r"--reps[= ](\d+)", data["machine"].get("command", ""))
  few = (f"Timed with {reps.group(1)} repetitions per point, below the rule of 5 above: the medians are less steady."
         if reps and int(reps.group(1)) < 5 else "")
  return paragraphs(provenance(path, data), facts, few, body)


ATTENTION_INTRO = """\
`benchmarks/attention.py`: each attention variant alone, per sequence length. One jitted step computes the loss
sum(attention(q, k, v)) and its gradients wrt q, k, v and the variant's learned parameters, if it has any. Each
variant runs with its defaults (and its `example_options` for a required option). temp MiB = the compiled step's
temporary buffers (`memory_analysis().temp_size_in_bytes`), read before running; a step that would need more than
`--max_temp_gib` is marked OOM and not run. fwd+bwd ms = median of the timed runs (`--reps`, 5 by default; the
file does not record how many) after one warm-up run (compile excluded; the minimum is given too: on a shared
machine it is the steadier figure). x ref = ratio to
`dot_product`, the dense reference, at the same length.
"""

TOP_KINDS = 12


def profile_section(path: str, data: dict) -> str:
  parts = [provenance(path, data)]
  for r in data["results"]:
    kinds = sorted(r["op_ms"].items(), key=lambda kv: (-kv[1], kv[0]))
    total = sum(ms for _, ms in kinds)
    rest = kinds[TOP_KINDS:]
    rows = [[f"`{kind}`", fixed(ms, 2), percent(ms / total)] for kind, ms in kinds[:TOP_KINDS]]
    rows.append([f"the other {len(rest)} kinds", fixed(sum(ms for _, ms in rest), 2),
                 percent(sum(ms for _, ms in rest) / total)])
    parts.append(f"**{r['shape']} {r['dtype']}**: {fixed(r['step_ms_traced'], 1)} ms per traced step, "
                 f"{fixed(total, 1)} ms of op time; the matmul kinds take {fixed(r['matmul_ms'], 1)} ms "
                 f"({percent(r['matmul_ms'] / total)} of op time) = {fixed(r['matmul_gflop_per_s'], 1)} GFLOP/s. "
                 f"{count(r['ops_per_step'])} ops per step; no op runs for {fixed(r['idle_ms'], 1)} ms of the "
                 "traced step.")
    parts.append(table(["op kind", "ms per step", "share of op time"], rows, "lrr"))
  return paragraphs(*parts)


PROFILE_INTRO = f"""\
`benchmarks/profile_step.py`: a `jax.profiler` trace of the compiled train step of `benchmarks/train_step.py`
(attention `auto`, dropout 0.1, label smoothing 0.1, Adam) in each dtype: three warm steps, then three traced
ones. Op time per kind = the trace's op (thunk) names with their numeric suffix removed, in ms per step
(`ynn_fusion` = the products XLA:CPU hands to its matmul library); the {TOP_KINDS} largest kinds are listed. Share
of op time = of the sum over all kinds. Op time can exceed the step time where XLA runs two ops at once, and the
profiler slows the step: a traced step is not the step time of [train_step.md](train_step.md). The matmul kinds are
`ynn_fusion`, `dot`, `dot_general`, `xnn_fusion` and `onednn`; their GFLOP/s = the step's model FLOPs (as in
train_step.md) / their time. Ops per step = the distinct ops (thunks) the step runs; the time no op runs = the
traced wall time between the first op and the last not covered by any op on any thread (the executor's dispatch
and the waits between dependent ops; the profiler's own cost inflates it).
"""


def accelerator_section(path: str, data: dict) -> str:
  sizes = ("Tiny sizes (`--tiny`): a smoke run of the script, not figures." if data.get("tiny") else
           "The script's full sizes (`FULL` in `benchmarks/accelerator.py`): attention batch 4, 1024 query tokens "
           "(cross-attention: 512 keys), 8 heads, head_dim 64; model BASE.")
  attention_rows = []
  for r in data["attention"]:
    if r["status"] == "refused":
      attention_rows.append([f"`{r['kernel']}`", r["call"], r["dtype"], f"refused: {r['reason']}", "-", "-", "-",
                             "-", "-"])
    else:
      tolerance = f"{r['tolerance'][0]:.0e} / {r['tolerance'][1]:.0e}"
      attention_rows.append([f"`{r['kernel']}`", r["call"], r["dtype"], r["status"], f"{r['output_error']:.1e}",
                             f"{r['grad_error']:.1e}", tolerance, timing(r["fwd_bwd_ms"], 3),
                             disturbed(r["fwd_bwd_ms"])])
  parts = [provenance(path, data), sizes, "**Attention kernels against the float32 reference**",
           table(["kernel", "call", "dtype", "status", "output error", "gradient error", "tolerance (out / grad)",
                  "fwd+bwd ms median (min-max)", "disturbed reps"], attention_rows, "llllrrrrr")]
  step = data.get("train_step")
  if step:
    parts += ["**Train step**",
              table(["shape", "dtype", "attention", "step ms median (min-max)", "tokens/s", "model GFLOP",
                     "XLA GFLOP", "model GFLOP/s", "peak GFLOP/s (bf16 matmul)", "MFU", "disturbed reps"],
                    [[step["shape"], step["dtype"], step["attention"], timing(step["step_ms"], 1),
                      count(step["tokens_per_s"]), fixed(step["model_gflop"], 1), fixed(step["xla_gflop"], 1),
                      fixed(step["model_gflop_per_s"], 1), fixed(step["peak_gflop_per_s"], 1),
                      percent(step["mfu"]), disturbed(step["step_ms"])]], "lllrrrrrrrr")]
  if data.get("decode"):
    parts += ["**Decoding**",
              table(["method", "ms per call median (min-max)", "output tokens", "output tokens/s", "ms per step",
                     "disturbed reps"],
                    [[r["method"], timing(r["decode_ms"], 1), count(r["output_tokens"]), count(r["tokens_per_s"]),
                      fixed(r["ms_per_step"], 2), disturbed(r["decode_ms"])] for r in data["decode"]], "lrrrrr")]
  if data.get("skipped"):
    parts.append("Skipped:\n" + "\n".join(f"- {line}" for line in data["skipped"]))
  return paragraphs(*parts)


ACCELERATOR_INTRO = """\
`benchmarks/accelerator.py`, the check to run on a GPU or TPU machine (on CPU it says what it skips):

1. Attention: each library kernel of the backend (GPU: `cudnn`, `pallas_gpu`; TPU: `splash`) and `auto`, against
   `dot_product` computed in float32 on the same (rounded) inputs, in bfloat16 and float32: the output, and the
   gradients wrt query, key and value, over the queries that see a key. Calls: causal self-attention with right
   padding (`self causal, padding`), cross-attention with padding, causal self-attention over packed rows
   (segment ids). Error = max |kernel - reference| / max |reference| (gradient error: the largest of the three).
   Tolerances: bfloat16 3e-2 (output) and 6e-2 (gradients); float32 1e-2 for both (GPU kernels may run float32
   products in TF32, TPUs in bfloat16 passes). A call a kernel cannot express is refused, with its reason;
   `cudnn` is not given packed rows (NaN by design; `auto` routes them per batch). fwd+bwd ms: one jitted
   forward and backward pass, timed. Which kernel `auto` picked per call is printed, not recorded in the JSON.
2. Train step: `benchmarks/train_step.py`'s step of BASE (batch 8 x (128, 128) tokens) in bfloat16 with
   attention `auto`; model GFLOP as in [train_step.md](train_step.md); MFU = model FLOP/s / the median FLOP/s of
   an in-process bfloat16 8192^3 matmul (float32 result) timed between the steps.
3. Decoding: `benchmarks/decode.py`'s beam 4 (alpha 0.6) and greedy search of BASE in bfloat16, random weights,
   batch 8, source length 64, 63 steps (see [decode.md](decode.md)).

The script exits with status 1 if a kernel misses its tolerance. A subset of the test suite on a GPU:
[gpu_tests.md](gpu_tests.md).
"""


def tested(results: dict) -> str:
  """Which checkpoint a run's test figures are of: its `tested_step` (train.keep_best), or the last step where the
  run predates that record."""
  if results.get("tested_step") is None:
    return "the last step (recorded before `train.keep_best`)"
  return f"step {results['tested_step']:,} ({results.get('tested_why') or results.get('tested_metric')})"


def demo_section(path: str, data: dict) -> str:
  r = data["results"]
  other = data.get("busy_share_other")
  body = table(["config", "overrides", "planned steps", "s per step", "train loss", "valid loss", "test BLEU",
                "tested", "wall time", "CPU used by other processes"],
               [[f"`{data['config']}`", " ".join(f"`{o}`" for o in data["overrides"]) or "none",
                 count(r.get("planned_steps", r["step"])), fixed(r.get("budget_step_seconds"), 3),
                 fixed(r.get("train_loss"), 3), fixed(r.get("eval_loss"), 3), fixed(r.get("bleu"), 2), tested(r),
                 f"{data['wall_seconds'] / 60:.1f} min", "not measured" if other is None else percent(other)]],
               "llrrrrrlrr")
  return paragraphs(provenance(path, data), body)


DEMO_INTRO = """\
`benchmarks/demo.py`: README command 1 (`jformer train --config=configs/demo.py`, 15 minutes of training on the
bundled English-German corpus, then beam search over the test split and sacreBLEU), run as a subprocess on a fresh
workdir and recorded with its `results.json`. The time budget plans the number of steps from the step time
measured on the machine, so the steps, and with them the BLEU, depend on the machine and on what else ran on it
(the last column: CPU time of other processes over the run, as a share of all CPU time). Wall time includes data
preparation, vocabulary training, compilation and the final test.
"""


def sweep_section(path: str, data: dict) -> str:
  body = table(data["headers"], [[cell(x) for x in row] for row in data["rows"]],
               "l" + "r" * (len(data["headers"]) - 1))
  parts = [f"**{data['title']}**", provenance(path, data), data["setup"], body]
  if data.get("figure"):
    parts.append(f"![{data['title']}]({data['figure']})")
  parts.append(findings.render(data["findings"]))
  return paragraphs(*parts)


SWEEP_INTRO = """\
Sweeps of research questions (`configs/sweeps/`, run with `jformer launch` and tabulated with `jformer sweep-report`):
each table with the sweep's setup, its points, and what the figures show and do not show.
"""


COMPILE_CACHE_INTRO = """\
`benchmarks/compile_cache.py`: what the persistent compilation cache (`jformer/runtime.py`, on by default) saves.
For each mode (cache off; on, in a fresh folder), three fresh `jformer train` processes of one config: point A,
point B (another `train.seed`: a seed sweep's second point, the same programs) and A resumed for as many steps
again; each evaluates and decodes BLEU on 8 sentences at its last step. `compile s` is the sum of JAX's
`backend_compile_duration` events in the process (XLA compiling a program, or loading it from the cache); `process
s` the whole process, data preparation (the first run prepares the dataset the others share), vocabulary training
and checkpoints included. One run per row, not the repetitions of the timing rules below, on a machine other
processes may share: the two point A rows (nothing to load either way) show the spread between runs. Programs compiled in under 0.5 s are not cached
(`runtime.CACHE_MIN_COMPILE_SECONDS`): what a cached run still compiles. A sweep over a value the train step holds
as a constant (the learning rate) compiles that step again and loads the rest.
"""


def compile_cache_section(path: str, data: dict) -> str:
  setup = f"Config `{data['config']}`, {data['steps']} steps per run (the resume: {2 * data['steps']})"
  if data.get("overrides"):
    setup += ", " + " ".join(f"`{o}`" for o in data["overrides"])
  rows = [[r["cache"], r["run"], fixed(r["compile_s"], 1), count(r["cache_hits"]), fixed(r["wall_s"], 1)]
          for r in data["rows"]]
  return paragraphs(provenance(path, data), setup + ".",
                    table(["cache", "run", "compile s", "programs loaded from the cache", "process s"], rows,
                          "llrrr"))


COMPILE_INTRO = """\
`benchmarks/compile.py`: what scanning the layers (`model.scan_layers`: one `nn.scan` over parameters stacked
`[num_layers, ...]`) changes in the train step's compile time and step time, against the looped layers (one copy
of the layer per layer in the program). The decoder-only language model, float32, dropout 0, paper Adam; both
layouts start from the same parameters (the looped ones stacked), so their first-step losses agree. `compile s`:
lowering and XLA compilation of the jitted step, measured once per row (not repeated).
"""


def compile_section(path: str, data: dict) -> str:
  setup = (f"d_model {data['d_model']}, {data['heads']} heads, d_ff {data['d_ff']}, vocabulary {data['vocab']}, "
           f"batch {data['batch']} x {data['length']} tokens.")
  rows = [[count(r["layers"]), r["layout"], fixed(r["compile_s"], 1), timing(r["step_ms"], 1),
           fixed(r["first_loss"], 5), disturbed(r["step_ms"])] for r in data["rows"]]
  missing = f"Not measured: {data['missing']}." if data.get("missing") else ""
  return paragraphs(provenance(path, data), setup,
                    table(["layers", "layout", "compile s", "step ms median (min-max)", "first-step loss",
                           "disturbed reps"], rows, "llrrrr"), missing)


def test_run_section(path: str, data: dict) -> str:
  rows = [[f"`{r['file']}`", count(r["passed"]), count(r["failed"]), count(r["skipped"])] for r in data["rows"]]
  totals = [sum(r[k] for r in data["rows"]) for k in ("passed", "failed", "skipped")]
  rows.append(["**all**"] + [f"**{count(t)}**" for t in totals])
  notes = [f"- failed: `{f['test']}`: {f['reason']}" for f in data["failed"]]
  notes += [f"- skipped: `{s['test']}`: {s['reason']}" for s in data["skipped"]]
  return paragraphs(provenance(path, data), f"{data['settings']}; {data['seconds']:.0f} s.",
                    table(["test file", "passed", "failed", "skipped"], rows, "lrrr"), "\n".join(notes))


COMPILE_FLAGS_INTRO = """\
`benchmarks/compile_flags.py`: what the XLA flags of every process of the test run (tests/xla_flags.py) buy and
cost, on the tests' tiny model (a 2+2-layer encoder-decoder, d_model 32). Each flag set in a fresh process: `eager
s`, the initialisation and a forward pass run op by op, as most tests run the model (JAX compiles each op for its
shape); `init s`, the jitted train-state initialisation compiled and run; `step compile s`, the jitted train step's
lowering and compilation; `step ms`, a step afterwards. One process per row, one after the other.
"""


def compile_flags_section(path: str, data: dict) -> str:
  rows = [[r["flags"], f"`{r['xla_flags']}`" if r["xla_flags"] else "", fixed(r["eager_s"], 2), fixed(r["init_s"], 2),
           fixed(r["step_compile_s"], 2), timing(r["step_ms"], 2), fixed(r["first_loss"], 5), disturbed(r["step_ms"])]
          for r in data["rows"]]
  return paragraphs(provenance(path, data), table(
      ["flags", "XLA_FLAGS", "eager s", "init s", "step compile s", "step ms median (min-max)", "first-step loss",
       "disturbed reps"], rows, "llrrrrrr"))


TEST_RUN_INTRO = """\
A subset of jformer's own tests run on an accelerator (`benchmarks/gpu_tests.sh`): the ops, every attention variant
against its reference (forward, gradients, masks, cached decoding), the kernels, the block options, the models and
beam search, with the tolerances they have on CPU. Tests that need 8 devices, train for minutes or start processes
are not in the subset.
"""


def report_card_section(path: str, data: dict) -> str:
  card, baseline = data["card"], data["baseline"]
  other = data.get("busy_share_other")
  setup = (f"`jformer report-card {' '.join(data['overrides'])}`: {data['wall_seconds'] / 60:.1f} min of wall time; "
           f"CPU used by other processes: {'not measured' if other is None else percent(other)}.")
  base = ("No baseline card was cached." if baseline is None else
          f"The `{baseline['variant']}` column: its cached card (`jformer/report_card/rows/"
          f"{baseline['variant']}.json`), measured {baseline['machine']['date']} at "
          f"`{baseline['machine']['commit']}` on {machine_line(baseline['machine'])}.")
  progress = "The card's progress lines (the training runs' own lines between them left out):\n\n```\n" + "\n".join(
      data["progress"]) + "\n```"
  # The card labelled every difference better or worse; one seed measures no spread, so the page gives none.
  unlabelled = data["table"].replace(" (better)", "").replace(" (worse)", "")
  verdict = ("The last column is the difference, without a verdict: each training part ran one seed, so no spread "
             "was measured to tell a difference from seed noise, and the baseline's times and memory were measured "
             "in another process.")
  return paragraphs(provenance(path, data), setup, unlabelled, verdict, base,
                    f"![report card: {card['variant']}]({data['figure']})", progress)


REPORT_CARD_INTRO = """\
`jformer report-card` (jformer/report_card/) grades an attention variant on a fixed suite and prints it beside
dot-product attention's cached card: answer accuracy on the test split of MQAR at the two points of
configs/sweeps/mqar.py (width 64; 64 tokens and 4 pairs for 500 steps, 128 and 8 for 3,000), induction heads and
selective copying (configs/induction.py, configs/selective_copy.py); the LM demo's test bits per byte at its trained context 256 and at 512 and 1,024; one
train step of the LM demo's model at 2,048 tokens (median ms of 5, compiled temporary memory); one decode step for 8
rows after 1,024 positions (median ms of 5, the decode state). Recorded with `benchmarks/report_card.py`, which runs
the command as a subprocess. One seed per training part: differences of a few points of accuracy or hundredths of a
bit are within what another seed moves.
"""


def peers_section(path: str, data: dict) -> str:
  """The table `benchmarks/peers.py` printed (kept in its JSON), the peaks and the parameter counts."""
  peaks = "\n".join(f"- {shape} peaks ({data['peak_size']}^3 matmul, median GFLOP/s between the steps): "
                     + ", ".join(f"{k} {v['gflop_per_s']}" for k, v in probes.items())
                     for shape, probes in data["peaks"].items())
  parameters = "\n".join(f"- {shape} parameters: jformer {c['jformer']:,}, torch {c['torch']:,}"
                          for shape, c in data["parameters"].items())
  threads = f"torch {data['machine'].get('torch', '?')}, {data['machine'].get('torch_threads', '?')} intra-op threads."
  return paragraphs(provenance(path, data), threads, data["table"], peaks, parameters)


PEERS_INTRO = """\
`benchmarks/peers.py` times one train step (forward, backward, AdamW update) of PyTorch's `torch.nn.Transformer`
(post-LN, tied embeddings, label smoothing 0.1, dropout 0.1), eager in float32 and under
`torch.autocast("cpu", dtype=torch.bfloat16)`, and compiled with `torch.compile`, beside jformer's own step in float32
and bfloat16, on the TINY and BASE shapes of `benchmarks/common.py`, in one process, the contenders taking turns
every round. tokens/s = batch x (source + target) / median step; CPU MFU = the matmul FLOPs of
`common.Shape.train_flops` / median / JAX's matmul peak of the row's dtype; vs torch bf16 = tokens/s over the
`torch-eager-bf16` row of the same shape. What differs between the two models (torch's key bias and final norms,
its attention and ReLU dropout) is in the script's docstring.
"""


def lm_baseline_section(path: str, data: dict) -> str:
  """One row per text and model: valid and test bits per byte, steps, and the rise of the valid curve late on."""
  rows = []
  for corpus in data["corpora"]:
    size = f"{corpus['name']} ({corpus['bytes'] / 1e6:.2f} MB, {corpus['documents']:,} documents)"
    for model, label in (("jformer", "jformer `configs/lm_demo.py`"), ("nanogpt", "nanoGPT byte-level")):
      run = corpus[model]
      chosen = f"vocabulary {run['vocab_size']}, dropout {run['dropout_rate']}" if model == "jformer" else \
          "bytes, dropout 0.2"
      rows.append([size, label, chosen, count(run["steps"]), fixed(run["valid_bpb"], 3), fixed(run["test_bpb"], 3),
                   tested(run) if model == "jformer" else "the last step", fixed(run["late_rise"], 3),
                   percent(run["busy_share_other"])])
  body = table(["text (train split)", "model", "chosen", "steps", "valid bits/byte", "test bits/byte", "tested",
                "late rise", "CPU used by other processes"], rows, "lllrrrlrr")
  recipes = "\n".join(f"- {c['name']}: `{c['jformer']['recipe']}`" for c in data["corpora"])
  xz = ", ".join(f"{c['name']} {c['jformer']['xz_bpb']:.3f}" for c in data["corpora"] if c["jformer"].get("xz_bpb"))
  parts = [provenance(path, data), f"Each run trained for {data['minutes']:g} minutes of wall clock.", body,
           "The start-up line of each jformer run (what its rules chose, from what):\n" + recipes]
  if xz:
    parts.append(f"`xz -9` on the same valid text, bits per byte: {xz}.")
  if data.get("figure"):
    parts.append(f"![valid bits per byte against training time]({data['figure']})")
  return paragraphs(*parts)


LM_BASELINE_INTRO = """\
`benchmarks/lm_baseline.py` trains, on each text folder, the LM demo (`jformer train --config=configs/lm_demo.py`,
its time budget, vocabulary and dropout chosen by its rules at start-up) and then nanoGPT's model with its
shakespeare_char recipe, byte-level, at the LM demo's width, depth, heads, rows and context
(`benchmarks/nanogpt_baseline.py`, eager PyTorch), each for the same minutes, one after the other. Bits per byte
of the same valid and test text (lower is better). `late rise`: the highest valid bits per byte in the last
quarter of the run's steps less the lowest before it; a value <= 0 means the curve did not turn up at the end.
Rows and context are equal in positions (16 x 256): nanoGPT's positions are bytes, the LM demo's are subword pieces
of about 4 bytes, so a jformer row holds about 4 times the text. Valid and test of the software-message text come
from other projects than its training split (`benchmarks/corpus_subsets.py`).
"""


def surgery_section(path: str, data: dict) -> str:
  """One row per conversion of the LM demo: valid bits per byte after attention transfer, after fine-tuning, and of
  the same architecture from scratch at equal total steps, beside the teacher's."""
  teacher = data["teacher"]
  conversion = data["transfer_steps"] + data["finetune_steps"]
  scratch = {teacher["steps"] + conversion: "the teacher's and the conversion's steps together: equal total steps",
             conversion: "the conversion's steps: equal steps after the teacher, whose own are not counted"}
  steps = (f"The teacher trained {count(teacher['steps'])} steps; a conversion {data['transfer_steps']} transfer "
           f"steps (where its attention learns parameters of its own) and {data['finetune_steps']} fine-tuning "
           f"steps; the from-scratch runs {count(data['scratch_steps'])} steps "
           f"({scratch.get(data['scratch_steps'], 'as set')}).")
  rows = [["teacher: softmax (configs/lm_demo.py)", count(teacher["steps"]), "-", fixed(teacher["valid_bpb"], 3),
           "-", "-"]]
  for row in data["rows"]:
    scratch = row.get("scratch_bpb")
    rows.append([row["about"], count(row["converted_steps"]), fixed(row.get("after_transfer_bpb"), 3),
                 fixed(row["converted_bpb"], 3), fixed(scratch, 3),
                 "-" if scratch is None else fixed(row["converted_bpb"] - scratch, 3)])
  body = table(["model", "conversion steps", "after transfer", "after fine-tuning", "from scratch",
                "converted - scratch"], rows, "lrrrrr")
  parts = [provenance(path, data), steps, body]
  if data.get("findings"):
    parts.append(findings.render(data["findings"]))
  if data.get("figure"):
    parts.append(f"![valid bits per byte against steps]({pathlib.Path(data['figure']).name})")
  return paragraphs(*parts)


SURGERY_INTRO = """\
`benchmarks/surgery.py` converts the LM demo's softmax model into attention variants and compares, at equal steps
(the machine is shared, so minutes buy different steps), valid bits per byte (lower is better): right after
attention transfer (`train.attention_transfer`: only the new attention's own parameters train, to reproduce each
softmax layer's output; LoLCATs, Zhang et al. 2025), after fine-tuning everything, and the same architecture
trained from scratch with the demo's recipe (for the steps the table names). A transfer step
costs more than a plain one (the teacher's attention runs beside the new one). `-` in "after transfer": a variant
without parameters of its own (elu + 1 linear attention, the local window) has nothing to transfer; it is
fine-tuned directly.
"""


INTEROP_MEMORY_INTRO = """\
`benchmarks/interop_memory.py`: the peak resident memory of `jformer import-hf` and `export-hf` against the size of
the checkpoint. A synthetic Llama-shaped checkpoint in bfloat16 (random weights, generated one tensor at a time) is
written in shards with its `model.safetensors.index.json`; each command runs in a process of its own, whose peak
resident set (`ru_maxrss` of a small launcher's child, file pages it mapped included) is the figure. The same
commands on the tiny llama fixture give what a jformer process holds whatever the model (Python, JAX, Orbax): the
baseline, subtracted. The import reads one tensor at a time through a memory map, keeps bfloat16 and saves the
parameters where they are (no copy); the export writes one shard at a time, but first restores the run's parameters
through Orbax, which holds about twice their size while it reads them (measured in-process: 3.9 GiB resident for
1.97 GB of parameters). Target: above the baseline, at most the model's own size plus one shard. One run, not a
timing: the seconds say how long it took on a shared machine.
"""


def interop_memory_section(path: str, data: dict) -> str:
  gib = lambda x: fixed(x / 2**30, 2)
  setup = (f"{data['parameters'] / 1e9:.2f} B parameters ({data['layers']} layers), {gib(data['checkpoint_bytes'])} "
           f"GiB of weights in {data['shards']} shards of at most {data['max_shard_size']} (the largest "
           f"{gib(data['largest_shard_bytes'])} GiB); exported in shards of the same size.")
  rows = [[r["checkpoint"], gib(r["weights_bytes"]), gib(r["import_peak_bytes"]), fixed(r["import_seconds"], 0),
           gib(r["export_peak_bytes"]), fixed(r["export_seconds"], 0)] for r in data["rows"]]
  verdict = (f"Above the baseline: the import {gib(data['import_above_baseline_bytes'])} GiB, the export "
             f"{gib(data['export_above_baseline_bytes'])} GiB; the target (the model plus one shard) "
             f"{gib(data['target_bytes'])} GiB.")
  return paragraphs(provenance(path, data), setup,
                    table(["checkpoint", "weights GiB", "import peak GiB", "import s", "export peak GiB",
                           "export s"], rows, "lrrrrr"), verdict)


GATED_DELTANET_INTRO = """\
`benchmarks/gated_deltanet.py`: Gated DeltaNet's (`gated_deltanet`, [docs/attention.md](../attention.md)) two forms
of one recurrence, each in one jitted step that computes a causal self-attention call and its gradients, on CPU:
the chunked training form (a triangular solve per chunk of C tokens, a `lax.scan` over the chunks) for each C, and
the recurrence one token at a time (a `lax.scan` over the tokens: the decode step from an empty state). `x
recurrence time`: the step's median over the recurrence's; `max |out - recurrence out|`: the largest difference of
the form's float32 output from the recurrence's; `compile s`: measured once.
"""


def gated_deltanet_section(path: str, data: dict) -> str:
  setup = (f"{data['length']:,} tokens, batch {data['batch']}, {data['heads']} heads, head_dim {data['head_dim']}, "
           "causal, float32.")
  recurrence = next(r for r in data["rows"] if r["form"].startswith("recurrence"))["ms"]["median"]
  rows = [[r["form"], timing(r["ms"], 2), f"{r['ms']['median'] / recurrence:.3f}", fixed(r["compile_s"], 2),
           f"{r['max_difference']:.1e}", disturbed(r["ms"])] for r in data["rows"]]
  return paragraphs(provenance(path, data), setup, table(
      ["form", "fwd+bwd ms median (min-max)", "x recurrence time", "compile s", "max \\|out - recurrence out\\|",
       "disturbed reps"], rows, "lrrrrr"))

@dataclasses.dataclass(frozen=True)
class Page:
  file: str
  title: str
  kind: str  # the `benchmark` key of its JSON files
  summary: str  # its line in the index
  intro: str
  section: Callable[[str, dict], str]
  timed: bool = True  # its figures follow TIMING_RULES (a benchmark's repetitions), not one run's


PAGES = (
    Page("train_step.md", "Train step: throughput and MFU", "train_step",
         "train step tokens/s, model and XLA GFLOP, CPU MFU (TINY, BASE; float32, bfloat16; the similarity "
         "variants)", TRAIN_STEP_INTRO, train_step_section),
    Page("decode.md", "Decoding throughput", "decode", "beam search and greedy decoding, output tokens/s",
         DECODE_INTRO, decode_section),
    Page("memory.md", "Train step memory", "memory", "XLA temporary memory of the BASE train step up to long "
         "sequences", MEMORY_INTRO, memory_section),
    Page("context_parallel.md", "Context parallelism: memory per device", "context_parallel", "the long-context "
         "train step's memory per device against the sequence axis (1, 2, 4, 8), gather and ring",
         CONTEXT_PARALLEL_INTRO, context_parallel_section),
    Page("input_pipeline.md", "Input pipeline", "input_pipeline", "the demo's data pipeline against what its "
         "train step consumes", INPUT_PIPELINE_INTRO, input_pipeline_section),
    Page("attention.md", "Attention variants alone", "attention", "forward+backward time and temporary memory "
         "per attention variant and length", ATTENTION_INTRO, attention_section),
    Page("profile_step.md", "Where a train step's time goes", "profile_step", "op time by kind under "
         "`jax.profiler`", PROFILE_INTRO, profile_section),
    Page("demo.md", "The demo run", "demo", "README command 1 on the bundled corpus: planned steps, losses, test "
         "BLEU", DEMO_INTRO, demo_section, timed=False),
    Page("sweeps.md", "Research sweeps", "sweep", "the similarity function (paper Sec. 3.2.1); MQAR recall "
         "against width (Zoology); length extrapolation of the positional encodings; the block ablation; the "
         "demo's dtype, vocabulary, block at the slowest machines' steps, recipe rules and block against corpus size, "
         "and checkpoint averaging", SWEEP_INTRO,
         sweep_section, timed=False),
    Page("gpu_tests.md", "The tests on a GPU", "test_run", "a subset of the test suite on an NVIDIA H200: "
         "passed, failed and skipped per file", TEST_RUN_INTRO, test_run_section, timed=False),
    Page("accelerator.md", "Accelerator (GPU/TPU) check", "accelerator", "attention kernels against the "
         "reference, the BASE bfloat16 train step and decoding on a GPU", ACCELERATOR_INTRO, accelerator_section),
    Page("compile_cache.md", "The persistent compilation cache", "compile_cache", "compile seconds of a sweep "
         "point and of a resume, with and without the cache", COMPILE_CACHE_INTRO, compile_cache_section),
    Page("report_card.md", "Report cards", "report_card", "`jformer report-card` on a variant: synthetic recall, "
         "LM bits per byte, step time, memory, decode", REPORT_CARD_INTRO, report_card_section, timed=False),
    Page("peers.md", "Beside PyTorch", "peers", "jformer's train step against PyTorch's nn.Transformer, eager "
         "and compiled, float32 and bfloat16 autocast", PEERS_INTRO, peers_section),
    Page("lm_baseline.md", "The LM demo beside nanoGPT", "lm_baseline", "configs/lm_demo.py against nanoGPT's "
         "byte-level model and recipe at equal wall clock, on texts of several sizes", LM_BASELINE_INTRO,
         lm_baseline_section, timed=False),
    Page("surgery.md", "Attention surgery on the LM demo", "surgery", "the LM demo's softmax model converted to "
         "linear (hedgehog, elu + 1), hybrid and local attention by attention transfer and fine-tuning, against "
         "the same architectures from scratch at equal steps", SURGERY_INTRO, surgery_section, timed=False),
    Page("interop_memory.md", "Pretrained checkpoints: memory of import and export", "interop_memory", "peak "
         "resident memory of `jformer import-hf` and `export-hf` on a 2 GB sharded bfloat16 checkpoint, against "
         "the model's size plus one shard", INTEROP_MEMORY_INTRO, interop_memory_section, timed=False),
    Page("compile_flags.md", "The test run's XLA flags", "compile_flags", "eager, init and train step compile "
         "seconds and step ms of the tests' model under XLA's defaults, -O0, and -O0 with the classic emitters",
         COMPILE_FLAGS_INTRO, compile_flags_section),
    Page("compile.md", "Scanned layers: compile and step time", "compile", "train step compile seconds and step "
         "ms at 6, 12 and 24 layers, looped against scanned", COMPILE_INTRO, compile_section),
    Page("gated_deltanet.md", "Gated DeltaNet: the chunked form against the recurrence", "gated_deltanet",
         "forward+backward ms of Gated DeltaNet's chunked training form per chunk size against its token-by-token "
         "recurrence at 2,048 tokens (CPU)", GATED_DELTANET_INTRO, gated_deltanet_section),
)


def header(sources: str) -> str:
  return (f"<!-- Generated by docs/results/generate.py from {sources}: do not edit by hand; change the JSON or the "
          f"generator and run `{COMMAND}`. -->")


def load_results(repo: pathlib.Path) -> dict[str, list[tuple[str, dict]]]:
  """{benchmark kind: [(repository path, data)]}, files in name order; a kind no page renders is an error."""
  kinds = {page.kind for page in PAGES}
  found: dict[str, list[tuple[str, dict]]] = {kind: [] for kind in kinds}
  for file in sorted((repo / RESULTS).glob("*.json")):
    path = file.relative_to(repo).as_posix()
    data = json.loads(file.read_text())
    kind = data.get("benchmark")
    if kind not in kinds:
      raise SystemExit(f"{path}: benchmark {kind!r} has no page in docs/results/generate.py (known: "
                       f"{sorted(kinds)}); add one to PAGES")
    found[kind].append((path, data))
  return found


def render_page(page: Page, files: list[tuple[str, dict]]) -> str:
  sources = ", ".join(path for path, _ in files) or f"no {RESULTS}/*.json of this kind"
  reduced = [f"{findings.banner(data)} (`{pathlib.PurePosixPath(path).name}`)" for path, data in files
             if findings.banner(data)]
  parts = [header(sources), f"# {page.title}", *reduced, page.intro] + ([TIMING_RULES] if page.timed else [])
  if not files:
    parts.append(f"No results of this kind in `{RESULTS}/`.")
  for path, data in files:
    parts.append(f"## `{pathlib.PurePosixPath(path).name}`")
    caption = CAPTIONS.get(pathlib.PurePosixPath(path).name)
    if caption:
      parts.append(caption)
    parts.append(page.section(path, data))
  return paragraphs(*parts) + "\n"


def render_support(support: dict) -> str:
  """support.md: the feature x platform matrix, each cell's status and evidence, notes numbered in order."""
  notes: list[str] = []

  def render_cell(c: dict) -> str:
    text = c["status"]
    if c.get("evidence"):
      text += ": " + ", ".join(f"`{e}`" for e in c["evidence"])
    if c.get("note"):
      notes.append(c["note"])
      text += f" [{len(notes)}]"
    return text

  rows = [[row["feature"]] + [render_cell(row[p]) for p in PLATFORMS] for row in support["rows"]]
  legend = "\n".join(f"- **{status}**: {meaning}." for status, meaning in STATUSES.items())
  notes_text = "\n".join(f"{i}. {note}" for i, note in enumerate(notes, 1))
  return paragraphs(header(SUPPORT), "# Where jformer runs: the support matrix", support["intro"], legend,
                    table(["feature"] + list(PLATFORMS), rows), "Notes:", notes_text) + "\n"


BOARD_INTRO = """\
`jformer report-card --leaderboard` grades every row of the board on the report card's suite
(jformer/report_card/suite.py), each row written to `{board}/<row>.json` the moment it finishes; a rerun grades only
the rows not yet graded at the current suite version. Learning figures (answer accuracy on the test split of each
synthetic task, a small LM's test bits per byte on the LM demo's text) are at a fixed number of steps, the mean over
the row's seeds with their range; time and memory are ratios to dot_product measured in the same command on the same
machine. So rows graded on different machines compare: a faster machine shortens a row, not how far it trains
(floating-point rounding differs between CPUs, a difference of the kind another seed makes). A difference is called
better or worse only where the seeds' ranges (or the timed repetitions') do not overlap; otherwise "within noise".
"""


def _board_cell(metric: dict, card: dict, baseline: dict) -> str:
  """A learning figure: 'mean (low-high)' over the seeds; a time or memory: the ratio to the baseline column."""
  name, digits = metric["name"], metric["digits"]
  samples = card.get("samples", {}).get(name) or [card["values"].get(name)]
  if None in samples:
    return "-"
  if metric["compare"] == "ratio":
    base = baseline["values"].get(name)
    return "-" if not base else f"{card['values'][name] / base:.2f}x"
  mean = sum(samples) / len(samples)
  spread = f" ({min(samples):.{digits}f}-{max(samples):.{digits}f})" if len(samples) > 1 else ""
  return f"{mean:.{digits}f}{spread}"


def render_board(repo: pathlib.Path) -> str:
  """report_cards.md: one table row per graded row of the board (board.json's order), the verdicts against
  dot_product, where and how long each row was graded, and the rows still missing."""
  folder = repo / BOARD
  board = json.loads((folder / "board.json").read_text())
  version, metrics = board["suite_version"], board["metrics"]
  graded = {}
  for name in board["rows"]:
    path = folder / f"{name}.json"
    card = json.loads(path.read_text()) if path.exists() else None
    if card is not None and card.get("suite_version") == version:
      graded[name] = card
  missing = [name for name in board["rows"] if name not in graded]
  first = (f"**A partial board**: {len(graded)} of {len(board['rows'])} rows graded at suite version {version}; "
           f"not graded yet: {', '.join(missing)}. Nothing is concluded about a missing row." if missing else
           f"All {len(board['rows'])} rows graded at suite version {version}.")
  headers = ["row"] + [metric["label"] for metric in metrics]
  rows = [[f"`{name}`"] + [_board_cell(metric, card, card["baseline"]) for metric in metrics]
          for name, card in graded.items()]
  verdicts = [[f"`{name}`"] + [card.get("comparison", {}).get(metric["name"], "-") for metric in metrics]
              for name, card in graded.items() if name != "dot_product"]
  wall = lambda card: card.get("wall_seconds", card["total_seconds"])
  where = [f"- `{name}`: {card['seeds']} seeds, {wall(card) / 60:.1f} min; {card['machine']['date']}, "
           f"commit `{card['machine']['commit']}`, {machine_line(card['machine'])}; `{card['command']}`"
           + (f". Note: {card['note']}" if card.get("note") else "")
           for name, card in graded.items()]
  total = sum(wall(card) for card in graded.values())
  return paragraphs(
      header(f"{BOARD}/*.json"), "# The leaderboard: every variant on the report card's suite", first,
      BOARD_INTRO.format(board=BOARD),
      table(headers, rows, "l" + "r" * len(metrics)) if rows else "No row graded yet.",
      "Against dot_product (mean difference or ratio; better or worse only beyond the spread):",
      table(headers, verdicts, "l" + "r" * len(metrics)) if verdicts else "No row besides dot_product graded yet.",
      f"Where and how long each row was graded ({total / 60:.0f} minutes for the {len(graded)} rows):",
      "\n".join(where) or "-") + "\n"


def render_index(files_by_page: dict[str, list[str]]) -> str:
  lines = []
  for page in PAGES:
    sources = ", ".join(f"`{pathlib.PurePosixPath(p).name}`" for p in files_by_page[page.file]) or "no results"
    lines.append(f"- [{page.title}]({page.file}): {page.summary} ({sources})")
  lines.append("- [The leaderboard](report_cards.md): every trainable variant and shipped pattern on the report "
               f"card's suite, one row per command (`{BOARD}/*.json`)")
  lines.append("- [Where jformer runs: the support matrix](support.md): each feature on CPU, GPU and TPU, tested "
               "in CI, measured once by hand or untested (`support.json`)")
  intro = (f"Every measured figure of jformer, generated by `{COMMAND}` from the JSON the benchmark scripts write "
           f"(`{RESULTS}/*.json`) and from `support.json`; `{COMMAND} --check` names the pages that are stale "
           "(`tests/test_results_pages.py` runs it). Each table says the date, commit, machine, software and "
           "command it comes from. To add a result: run the benchmark with `--json=benchmarks/results/NAME.json`, "
           "then the generator.")
  return paragraphs(header(f"{RESULTS}/*.json and {SUPPORT}"), "# Results", intro, "\n".join(lines)) + "\n"


def render_all(repo: pathlib.Path = REPO) -> dict[str, str]:
  """{file name under docs/results/: its text}."""
  results = load_results(repo)
  pages = {page.file: render_page(page, results[page.kind]) for page in PAGES}
  pages["support.md"] = render_support(json.loads((repo / SUPPORT).read_text()))
  pages["report_cards.md"] = render_board(repo)
  pages["README.md"] = render_index({page.file: [p for p, _ in results[page.kind]] for page in PAGES})
  return dict(sorted(pages.items()))


def finding_problems(repo: pathlib.Path = REPO) -> list[str]:
  """What the findings of each results file claim that the file does not hold (`findings.problems`)."""
  return [f"{path}: {problem}" for files in load_results(repo).values() for path, data in files
          for problem in findings.problems(data)]


def stale(pages: dict[str, str], folder: pathlib.Path) -> list[str]:
  """The pages whose file in `folder` is missing or differs."""
  return [name for name, text in pages.items()
          if not (folder / name).is_file() or (folder / name).read_text() != text]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale pages")
  parser.add_argument("--out", default="", help=f"write the pages here instead of {PAGES_DIR}/")
  args = parser.parse_args(argv)
  pages = render_all(REPO)
  folder = pathlib.Path(args.out) if args.out else REPO / PAGES_DIR
  if args.check:
    unsupported = finding_problems(REPO)
    for problem in unsupported:
      print(f"unsupported finding: {problem}")
    names = stale(pages, folder)
    for name in names:
      print(f"stale: {PAGES_DIR}/{name}" if not args.out else f"stale: {folder / name}")
    if names:
      print(f"run `{COMMAND}` to regenerate", file=sys.stderr)
    if unsupported:
      print("a finding names the rows it rests on and states only numbers of its file (docs/results/findings.py)",
            file=sys.stderr)
    if names or unsupported:
      return 1
    print(f"{len(pages)} pages up to date")
    return 0
  folder.mkdir(parents=True, exist_ok=True)
  for name, text in pages.items():
    (folder / name).write_text(text)
  print(f"wrote {len(pages)} pages to {folder}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
