"""The `jformer` command (also `python -m jformer.main`): sub-commands for every job.

    jformer summary --config=configs/demo.py [--config.model.num_heads=8 ...]
    jformer attention list

Config overrides are `--config.<dotted.key>=<value>` after the sub-command.
"""

from __future__ import annotations

import argparse
import sys
import time

COMMANDS = {}


def command(name: str, help_text: str):
  """Registers `fn(args, overrides)` as sub-command `name`; `fn.add_arguments(parser)` may add flags."""
  def wrap(fn):
    COMMANDS[name] = (fn, help_text)
    return fn
  return wrap


def _summary_arguments(parser):
  parser.add_argument("--config", required=True, help="config file, e.g. configs/demo.py")
  parser.add_argument("--depth", type=int, default=3, help="module nesting shown in the table")
  parser.add_argument("--forward", action="store_true", help="also run one forward pass on a random batch")


@command("summary", "print parameters per module and in total")
def summary(args, overrides):
  import jax
  import jax.numpy as jnp

  from jformer import config as config_lib
  from jformer import models
  from jformer.models import summary as summary_lib

  config = config_lib.load(args.config, overrides)
  model = models.build(config)
  counts = summary_lib.count_by_module(summary_lib.param_shapes(model), depth=args.depth)
  print(f"config: {args.config}  (architecture={config.model.get('architecture')}, "
        f"attention={config.model.attention}, positional={config.model.positional}, norm={config.model.norm})")
  print(summary_lib.format_summary(counts))
  print(f"total parameters: {counts['total'] / 1e6:.2f}M")
  if args.forward:
    rng = jax.random.PRNGKey(0)
    length = min(32, config.model.max_length)
    tokens = jax.random.randint(rng, (2, length), 1, config.model.vocab_size)
    inputs = (tokens, tokens) if isinstance(model, models.Transformer) else (tokens,)
    params = jax.jit(model.init)(rng, *inputs)
    start = time.perf_counter()
    logits = jax.block_until_ready(jax.jit(model.apply)(params, *inputs))
    print(f"forward pass: inputs {tuple(tokens.shape)} -> logits {tuple(logits.shape)}, "
          f"mean {float(logits.mean()):.4f}, std {float(logits.std()):.4f}, finite={bool(jnp.isfinite(logits).all())}"
          f" ({time.perf_counter() - start:.2f}s incl. compile)")


summary.add_arguments = _summary_arguments


def _attention_arguments(parser):
  parser.add_argument("action", choices=["list"], help="'list': the registered attention variants")


@command("attention", "list the registered attention variants")
def attention_command(args, overrides):
  from jformer import attention

  for name in attention.available():
    variant = attention.get(name)
    print(f"{name:<14} {variant.doc}")
    print(f"{'':<14} supports: {', '.join(sorted(variant.supports))}"
          + (f"; options: {', '.join(variant.options)}" if variant.options else ""))


attention_command.add_arguments = _attention_arguments


def parse(argv):
  """Splits argv into (parsed sub-command args, {dotted config key: string value})."""
  parser = argparse.ArgumentParser(
      prog="jformer", description="jformer: the Transformer of 'Attention Is All You Need' in JAX/Flax.",
      epilog="Config values are overridden with --config.<key>=<value>, e.g. --config.model.num_heads=16.")
  sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
  for name, (fn, help_text) in COMMANDS.items():
    fn.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
  args, rest = parser.parse_known_args(argv)
  overrides = {}
  for item in rest:
    key, sep, value = item.partition("=")
    if not key.startswith("--config.") or not sep:
      parser.error(f"unrecognised argument '{item}' (config overrides look like --config.model.d_model=256)")
    overrides[key[len("--config."):]] = value
  return args, overrides


def main(argv=None):
  args, overrides = parse(sys.argv[1:] if argv is None else argv)
  fn, _ = COMMANDS[args.command]
  try:
    fn(args, overrides)
  except (KeyError, ValueError, TypeError, FileNotFoundError) as e:
    message = e.args[0] if isinstance(e, KeyError) and e.args else e
    sys.exit(f"jformer {args.command}: error: {message}")


if __name__ == "__main__":
  main()
