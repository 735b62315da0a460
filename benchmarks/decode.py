"""Decoding throughput: output tokens/s of beam search (beam 4, alpha 0.6) and greedy search with the KV cache.

TINY model (common.TINY) with random weights, batch 8, source length 64 (random ids), 63 decode steps with EOS
unreachable (its logit is -1e9 at every step, so every row and beam runs all 63 steps; the decoders force EOS
as the 63rd token). One jitted function per method (encoder + cache + search loop); output tokens = batch x 63.
Uses jformer's own decoders (`jformer/decode/`), the same calls `translate_ids` makes.

Float32 and bfloat16 (`model.dtype`; parameters float32) side by side.

    python benchmarks/decode.py [--reps=5] [--dtypes=float32,bfloat16] [--json=decode.json]
"""

from __future__ import annotations

import argparse

import common

BATCH, SOURCE_LENGTH, STEPS = 8, 64, 63
BEAM, ALPHA = 4, 0.6


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


def random_inputs(vocab: int):
  """Source ids `[BATCH, SOURCE_LENGTH]`, random in [1, vocab) (seed 0)."""
  import jax
  import numpy as np

  return jax.numpy.asarray(np.random.default_rng(0).integers(1, vocab, (BATCH, SOURCE_LENGTH), dtype=np.int32))


def measure(model, params, inputs, method: str, reps: int) -> dict:
  """Compiles and times one decoding `method` ("beam" or "greedy"); checks every row ran all STEPS steps."""
  import jax
  import numpy as np

  from jformer.decode import common as decode_common

  compiled = jax.jit(decode_function(model, method)).lower(params, inputs).compile()
  ids = np.asarray(compiled(params, inputs))
  # Every row ran all steps: EOS only as the forced last token.
  assert ids.shape == (BATCH, STEPS) and (ids[:, :-1] != decode_common.EOS_ID).all() and (
      ids[:, :-1] != 0).all(), ids
  timing = common.time_repeated(lambda: compiled(params, inputs), reps)
  tokens = BATCH * STEPS
  return {"method": f"beam {BEAM}, alpha {ALPHA}" if method == "beam" else "greedy",
          "decode_ms": timing.summary(1e3, 1), "output_tokens": tokens, "tokens_per_s": round(tokens / timing.median),
          "ms_per_step": round(1e3 * timing.median / STEPS, 2)}


def main(argv=None):
  common.setup()
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  common.add_common_arguments(parser, default_json="decode.json")
  common.add_dtypes_argument(parser)
  args = parser.parse_args(argv)
  common.check_reps(parser, args)
  dtypes = common.dtypes(parser, args)

  import jax

  from jformer.models import Transformer

  machine = common.announce()
  inputs = random_inputs(common.TINY.vocab)
  rows = []
  for dtype in dtypes:
    model = Transformer(common.TINY.model_config(dtype=jax.numpy.dtype(dtype)))
    params = jax.jit(model.init)(jax.random.PRNGKey(0), inputs, inputs[:, :1])["params"]
    for method in ("beam", "greedy"):
      rows.append({"dtype": dtype, **measure(model, params, inputs, method, args.reps)})
      print(f"{dtype} {rows[-1]['method']}: {rows[-1]['tokens_per_s']} tokens/s, disturbed reps "
            f"{rows[-1]['decode_ms']['disturbed']}", flush=True)
  print(common.markdown_table(
      ["dtype", "method", "ms per call median (min-max)", "output tokens", "tokens/s", "ms per step",
       "disturbed reps"],
      [[r["dtype"], r["method"], f"{r['decode_ms']['median']} ({r['decode_ms']['min']}-{r['decode_ms']['max']})",
        r["output_tokens"], f"{r['tokens_per_s']:,}", r["ms_per_step"],
        f"{r['decode_ms']['disturbed']}/{r['decode_ms']['reps']}"] for r in rows]))
  common.write_json(args.json, {"benchmark": "decode", "machine": machine, "shape": "TINY", "batch": BATCH,
                                "source_length": SOURCE_LENGTH, "steps": STEPS, "rows": rows})


if __name__ == "__main__":
  main()
