"""Decoding throughput: output tokens/s of beam search (beam 4, alpha 0.6) and greedy search with the KV cache.

TINY model (common.TINY) with random weights, batch 8, source length 64 (random ids), 63 decode steps with EOS
unreachable (its logit is -1e9 at every step, so every row and beam runs all 63 steps; the decoders force EOS
as the 63rd token). One jitted function per method (encoder + cache + search loop); output tokens = batch x 63.
Uses jformer's own decoders (`jformer/decode/`), the same calls `translate_ids` makes.

Float32 and bfloat16 (`model.dtype`; parameters float32) side by side. With `--flax-example`, each row is followed
by the Flax WMT example's decoding of the same shape, batch and steps (`benchmarks/flax_wmt_example.py`: its own
models.py and decode.py, from flax's source release; its beam search with one beam as greedy), the two timed in
turns of `--reps` calls, two rounds, in the same process.

Then what each attention variant keeps between decode steps (`jformer.attention.decode_state`), against the
generated length: the LM demo's model (decoder-only, d_model 256, 4 layers, 4 heads, rotary positions, float32,
random weights), batch 8, its decode cache after LENGTHS[i] positions (bytes of every cache array) and the time of
one decode step there (one token fed with `jformer.decode.generator.feed`, the position counter at the length).
`dot_product` keeps every key and value (grows with the length), `local` (window 128) the last 128, `linear` its
recurrent state (neither grows).

    python benchmarks/decode.py [--reps=5] [--dtypes=float32,bfloat16] [--lengths=256,...,4096] [--json=decode.json]
    python benchmarks/decode.py --flax-example --lengths= --json=benchmarks/results/decode_flax_example.json
"""

from __future__ import annotations

import argparse
import functools

import common

BATCH, SOURCE_LENGTH, STEPS = 8, 64, 63
BEAM, ALPHA = 4, 0.6
# The decode-state table: variants with their options, and generated lengths.
STATE_VARIANTS = {"dot_product": {}, "local": {"window_size": 128}, "linear": {}}
LENGTHS = (256, 512, 1024, 2048, 4096)


def decode_function(model, method: str):
  """`decode(params, inputs [B, S]) -> ids [B, STEPS]` with EOS blocked until the forced last token."""
  import jax

  from jformer.decode import common as decode_common, translator
  from jformer.decode.beam_search import beam_search
  from jformer.decode.greedy import greedy_search

  def without_eos(tokens_to_logits):
    def step(ids, cache):
      logits, cache = tokens_to_logits(ids, cache)
      return logits.at[:, decode_common.EOS_ID].set(-1e9), cache
    return step

  def decode(params, inputs):
    encoded = model.apply({"params": params}, inputs, method=model.encode)
    cache, fixed_cache = translator.split_cache(translator.init_cache(model, params, encoded, inputs, STEPS))
    if method == "beam":
      expand = lambda x: decode_common.flat_batch_beam_expand(x, BEAM)
      step = translator.make_tokens_to_logits(model, params, expand(encoded), expand(inputs),
                                              jax.tree.map(expand, fixed_cache))
      sequences, _ = beam_search(without_eos(step), cache, batch_size=BATCH, beam_size=BEAM, alpha=ALPHA,
                                 max_decode_len=STEPS)
      return sequences[:, 0]
    step = translator.make_tokens_to_logits(model, params, encoded, inputs, fixed_cache)
    return greedy_search(without_eos(step), cache, batch_size=BATCH, max_decode_len=STEPS)

  return decode


def table(rows: list[dict]) -> str:
  """The rows as the markdown table the script prints and docs/results/decode.md shows."""
  return common.markdown_table(
      ["dtype", "framework", "method", "ms per call median (min-max)", "output tokens", "tokens/s", "ms per step",
       "jformer / flax example", "disturbed reps"],
      [[r["dtype"], r["framework"], r["method"],
        f"{r['decode_ms']['median']} ({r['decode_ms']['min']}-{r['decode_ms']['max']})", r["output_tokens"],
        f"{r['tokens_per_s']:,}", r["ms_per_step"], f"{r['vs_flax_example']}x" if "vs_flax_example" in r else "-",
        f"{r['decode_ms']['disturbed']}/{r['decode_ms']['reps']}"] for r in rows])


def random_inputs(vocab: int):
  """Source ids `[BATCH, SOURCE_LENGTH]`, random in [1, vocab) (seed 0)."""
  import jax
  import numpy as np

  return jax.numpy.asarray(np.random.default_rng(0).integers(1, vocab, (BATCH, SOURCE_LENGTH), dtype=np.int32))


def jformer_call(model, params, inputs, method: str):
  """`call()`: one decoding of the batch by jformer's `method` ("beam" or "greedy"), compiled; checks every row
  ran all STEPS steps."""
  import jax
  import numpy as np

  from jformer.decode import common as decode_common

  compiled = jax.jit(decode_function(model, method)).lower(params, inputs).compile()
  ids = np.asarray(compiled(params, inputs))
  # Every row ran all steps: EOS only as the forced last token.
  assert ids.shape == (BATCH, STEPS) and (ids[:, :-1] != decode_common.EOS_ID).all() and (
      ids[:, :-1] != 0).all(), ids
  return lambda: compiled(params, inputs)


def flax_example_call(modules, dtype: str, inputs, method: str):
  """`call()`: one decoding of the batch by the Flax WMT example (`flax_wmt_example.decode_function`, TINY shape):
  beam search with BEAM beams, or with one (its greedy), compiled; checks it produced STEPS tokens per row, none of
  them EOS."""
  import jax
  import numpy as np

  import flax_wmt_example
  from jformer.decode import common as decode_common

  run, params = flax_wmt_example.decode_function(modules, common.TINY, dtype, inputs, STEPS,
                                                 BEAM if method == "beam" else 1, ALPHA, decode_common.EOS_ID)
  compiled = jax.jit(run).lower(params, inputs).compile()
  ids = np.asarray(compiled(params, inputs))
  assert ids.shape == (BATCH, STEPS) and (ids != decode_common.EOS_ID).all(), ids
  return lambda: compiled(params, inputs)


def measure(model, params, inputs, method: str, reps: int, example=None) -> list[dict]:
  """Rows of jformer's `method`, and with `example` (the Flax WMT example's modules) the example's row beside it:
  the two decodings timed in turns of `reps` calls, two rounds (`common.time_in_rounds`)."""
  import jax

  mine = jformer_call(model, params, inputs, method)
  if example is None:
    return [timed_row("jformer", method, common.time_repeated(mine, reps))]
  theirs = flax_example_call(example, jax.numpy.dtype(model.config.dtype).name, inputs, method)
  rows = [timed_row(framework, method, timing)
          for framework, timing in zip(("jformer", "flax WMT example"), common.time_in_rounds([mine, theirs], reps))]
  rows[0]["vs_flax_example"] = round(rows[0]["tokens_per_s"] / rows[1]["tokens_per_s"], 2)
  return rows


def timed_row(framework: str, method: str, timing) -> dict:
  """A row of the table from the `timing` of one decoding of the batch."""
  tokens = BATCH * STEPS
  return {"framework": framework, "method": f"beam {BEAM}, alpha {ALPHA}" if method == "beam" else "greedy",
          "decode_ms": timing.summary(1e3, 1), "output_tokens": tokens, "tokens_per_s": round(tokens / timing.median),
          "ms_per_step": round(1e3 * timing.median / STEPS, 2)}


def state_model(variant: str, options: dict, max_length: int):
  """The LM demo's model (random weights) with `variant`, positions up to `max_length`."""
  from jformer.models import LanguageModel, TransformerConfig

  config = TransformerConfig(architecture="lm", vocab_size=8000, d_model=256, num_heads=4, d_ff=1024,
                             num_encoder_layers=0, num_decoder_layers=4, dropout_rate=0.0, norm="pre",
                             positional="rotary", max_length=max_length, attention=variant,
                             attention_options=tuple(sorted(options.items())))
  config.validate()
  return LanguageModel(config)


def measure_state(model, params, length: int, reps: int) -> dict:
  """The decode cache of BATCH rows for `length` positions, its counters at `length - 1`, and one step there."""
  import jax
  import jax.numpy as jnp

  from jformer.decode import generator

  cache = jax.jit(functools.partial(generator.cache_at, model, batch=BATCH, length=length))(params)
  ids = jnp.ones((BATCH, 1), jnp.int32)
  step = jax.jit(lambda p, i, c: generator.feed(model, p, i, c)).lower(params, ids, cache).compile()
  timing = common.time_repeated(lambda: step(params, ids, cache)[0], reps)
  cache_bytes = sum(x.nbytes for x in jax.tree.leaves(cache))
  return {"length": length, "cache_mib": round(cache_bytes / 2**20, 3), "step_ms": timing.summary(1e3, 2)}


def state_rows(lengths, reps: int) -> list[dict]:
  import jax
  import jax.numpy as jnp

  rows = []
  for variant, options in STATE_VARIANTS.items():
    model = state_model(variant, options, max(lengths))
    params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.ones((1, 8), jnp.int32))["params"]
    for length in lengths:
      rows.append({"variant": variant, "options": options, **measure_state(model, params, length, reps)})
      print(f"{variant} at {length}: cache {rows[-1]['cache_mib']} MiB, step {rows[-1]['step_ms']['median']} ms",
            flush=True)
  return rows


def main(argv=None):
  common.setup()
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  common.add_common_arguments(parser, default_json="decode.json")
  common.add_dtypes_argument(parser)
  parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="generated lengths of the "
                      "decode-state table ('' = skip it)")
  parser.add_argument("--flax-example", action="store_true", help="also decode with the Flax WMT example "
                      "(benchmarks/flax_wmt_example.py; fetches flax's source release with pip once)")
  parser.add_argument("--flax-sdist", default=None, help="flax-<version>.tar.gz to read the example from instead")
  args = parser.parse_args(argv)
  common.check_reps(parser, args)
  dtypes = common.dtypes(parser, args)

  import jax

  from jformer.models import Transformer

  machine = common.announce()
  inputs = random_inputs(common.TINY.vocab)
  example = None
  if args.flax_example:
    import flax_wmt_example

    example = flax_wmt_example.load(args.flax_sdist)
  rows = []
  for dtype in dtypes:
    model = Transformer(common.TINY.model_config(dtype=jax.numpy.dtype(dtype)))
    params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs, inputs[:, :1])["params"]
    for method in ("beam", "greedy"):
      for row in measure(model, params, inputs, method, args.reps, example):
        rows.append({"dtype": dtype, **row})
        print(f"{dtype} {row['framework']} {row['method']}: {row['tokens_per_s']} tokens/s, disturbed reps "
              f"{row['decode_ms']['disturbed']}", flush=True)
  print(table(rows))
  states = state_rows([int(n) for n in args.lengths.split(",")], args.reps) if args.lengths else []
  if states:
    print(common.markdown_table(
        ["variant", "length", "cache MiB", "ms per step median (min-max)", "disturbed reps"],
        [[r["variant"], r["length"], r["cache_mib"],
          f"{r['step_ms']['median']} ({r['step_ms']['min']}-{r['step_ms']['max']})",
          f"{r['step_ms']['disturbed']}/{r['step_ms']['reps']}"] for r in states]))
  extra = {"flax_example": f"examples/wmt of flax {machine['flax']}'s source release"} if example else {}
  common.write_json(args.json, {"benchmark": "decode", "machine": machine, "shape": "TINY", "batch": BATCH,
                                "source_length": SOURCE_LENGTH, "steps": STEPS, "rows": rows,
                                "state_rows": states, **extra})


if __name__ == "__main__":
  main()
