"""Compile time and step time of the train step, layers looped against scanned (`model.scan_layers`), by depth.

The decoder-only language model (`model.architecture='lm'`), d_model 128, 4 heads, d_ff 512, vocabulary 1024, batch
8 x 64 tokens, float32, dropout 0 (so that the two layouts compute the same numbers), at 6, 12 and 24 layers. One
train step of jformer's own `make_train_step` (paper Adam, label smoothing 0.1), jitted and donated. Both layouts
start from the same parameters (the looped ones, stacked by `jformer.models.stack_layer_params`); the first step's
loss of each is printed beside its times, and must agree. `compile s`: lowering + XLA compilation of the step, run
once per row (not repeated); step ms: the timing rules' repetitions.

    python benchmarks/compile.py [--layers=6,12,24] [--reps=5] [--json=compile.json]
"""

from __future__ import annotations

import argparse
import time

import common

D_MODEL, HEADS, D_FF, VOCAB, BATCH, LENGTH = 128, 4, 512, 1024, 8, 64


def model_for(layers: int, scan: bool):
  """The benchmark language model with `layers` decoder layers, looped or scanned."""
  from jformer.models import LanguageModel, TransformerConfig

  config = TransformerConfig(architecture="lm", vocab_size=VOCAB, d_model=D_MODEL, num_heads=HEADS, d_ff=D_FF,
                             num_encoder_layers=0, num_decoder_layers=layers, dropout_rate=0.0, max_length=LENGTH,
                             scan_layers=scan)
  config.validate()
  return LanguageModel(config)


def measure(layers: int, reps: int) -> list[dict]:
  """Rows (looped, scanned) at `layers` layers: compile seconds, step ms, first-step loss."""
  import jax
  import numpy as np

  from jformer import config as config_lib
  from jformer.models import stack_layer_params
  from jformer.train import optim, state as state_lib, step as step_lib

  tx, schedule = optim.build_optimizer(config_lib.base_config().optimizer, D_MODEL)
  rng = np.random.default_rng(0)
  batch = {"targets": jax.numpy.asarray(rng.integers(1, VOCAB, (BATCH, LENGTH), dtype=np.int32))}
  looped = model_for(layers, scan=False)
  initial = jax.jit(lambda key: state_lib.init_train_state(looped, tx, key, batch))(jax.random.PRNGKey(0))
  rows = []
  for scan in (False, True):
    model = model_for(layers, scan)
    state = initial
    if scan:
      params = stack_layer_params(initial.params)
      state = initial.replace(params=params, opt_state=tx.init(params))
    state = jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, state)  # donated below.
    step = jax.jit(step_lib.make_train_step(model, tx, schedule, label_smoothing=0.1), donate_argnums=0)
    start = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    compile_s = time.perf_counter() - start
    first_loss, timing = common.time_train_steps(compiled, state, batch, reps)
    rows.append({"layers": layers, "layout": "scan" if scan else "loop", "compile_s": round(compile_s, 2),
                 "step_ms": timing.summary(1e3, 1), "first_loss": round(first_loss, 5)})
    step_ms = rows[-1]["step_ms"]
    print(f"{layers} layers, {rows[-1]['layout']}: compile {compile_s:.1f} s, step {step_ms['median']} ms "
          f"({step_ms['min']}-{step_ms['max']}), first loss {first_loss:.5f}", flush=True)
  return rows


def main(argv=None):
  common.setup()
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--layers", default="6,12,24", help="comma-separated layer counts")
  common.add_common_arguments(parser, default_json="compile.json")
  args = parser.parse_args(argv)
  common.check_reps(parser, args)
  depths = [int(n) for n in args.layers.split(",")]

  machine = common.announce()
  rows = [row for layers in depths for row in measure(layers, args.reps)]
  print(common.markdown_table(
      ["layers", "layout", "compile s", "step ms median (min-max)", "first-step loss", "disturbed reps"],
      [[r["layers"], r["layout"], r["compile_s"],
        f"{r['step_ms']['median']} ({r['step_ms']['min']}-{r['step_ms']['max']})", r["first_loss"],
        f"{r['step_ms']['disturbed']}/{r['step_ms']['reps']}"] for r in rows]))
  common.write_json(args.json, {"benchmark": "compile", "machine": machine, "model": "lm", "d_model": D_MODEL,
                                "heads": HEADS, "d_ff": D_FF, "vocab": VOCAB, "batch": BATCH, "length": LENGTH,
                                "rows": rows})


if __name__ == "__main__":
  main()
