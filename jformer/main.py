"""The `jformer` command (also `python -m jformer.main`): sub-commands for every job.

    jformer train --config=configs/demo.py --workdir=runs/demo [--verbose] [--config.train.steps=100 ...]
    jformer translate --workdir=runs/demo < sentences.en
    echo "The" | jformer generate --workdir=runs/lm [--method=sample --temperature=0.8 --top_p=0.9 --max_new_tokens=50]
    jformer average-checkpoints --workdir=runs/demo --last=5
    jformer evaluate --workdir=runs/lm [--split=valid|test] [--checkpoint=auto] [--config.data.max_length=1024]
    jformer summary --config=configs/demo.py [--config.model.num_heads=8 ...]
    jformer visualize-attention --workdir=runs/demo --text "Save the file before closing."
    jformer launch --sweep=configs/sweeps/attention_variants.py [--backend=local|slurm|tpu_vm] [--dry_run]
    jformer sweep-report --sweep=configs/sweeps/attention_variants.py
    jformer report-card --config.model.attention=linear [--config.imports=my_attention.py] [--remeasure]
    jformer list [attention|positional|normalization|activation|dataset|task] [--config.imports=my_attention.py]
    jformer import-hf path/to/hf_model --workdir=runs/llama [--dtype=float32] [--config.data.path=DIR ...]
    jformer train --workdir=runs/llama   (fine-tunes an imported model: the workdir's config)
    jformer export-hf --workdir=runs/llama path/to/out [--max_shard_size=5GB] [--dtype=bfloat16]
    jformer visualize-attention --workdir=runs/demo --text "Save the file." [--out=runs/demo/attention]

Config overrides are `--config.<dotted.key>=<value>` after the sub-command. Every sub-command takes `--verbose`
(the traceback of an error, not just its one line) and `--verbosity=debug|info|warning|error`, the absl log level
shown on the console (default warning: progress lines, warnings and errors; `info` adds e.g. the line saying which
kernel runs each attention call and why: `auto`'s choice, a flex variant on the blockwise engine). Exit codes (docs/reliability.md): 0 done (a preempted run too),
1 the command failed on its input (config, data, workdir) or a fault, 2 a command-line usage error.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from jformer import runtime

COMMANDS = {}
VERBOSITIES = ("debug", "info", "warning", "error")  # `--verbosity`: absl's level names.


def command(name: str, help_text: str):
  """Registers `fn(args, overrides)` as sub-command `name`; `fn.add_arguments(parser)` may add flags."""
  def wrap(fn):
    COMMANDS[name] = (fn, help_text)
    return fn
  return wrap


def _train_arguments(parser):
  parser.add_argument("--config", help="config file, e.g. configs/demo.py (default: the workdir's own config.json, "
                      "e.g. a model imported by import-hf)")
  parser.add_argument("--workdir", required=True,
                      help="run folder, local or gs://bucket/run: checkpoints, logs, results (resumed if present)")


@command("train", "train and evaluate a config (resumes from the workdir's checkpoints)")
def train(args, overrides):
  from jformer import config as config_lib
  from jformer import parallel
  from jformer.train.loop import train_and_evaluate
  from jformer.config.adaptive import adapt

  _quiet_logs()
  config = config_lib.load(args.config, overrides) if args.config else config_lib.load_run(args.workdir, overrides)
  parallel.initialize_distributed(config.parallel.coordinator_address, config.parallel.num_processes,
                                  config.parallel.process_id)
  train_and_evaluate(adapt(config, fixed=overrides, workdir=args.workdir), args.workdir)


train.add_arguments = _train_arguments


def _checkpoint_argument(parser):
  parser.add_argument("--checkpoint", default="auto",
                      help="'auto' (what the run tested: averaged if present, else its best by train.keep_best, else "
                      "latest), 'averaged', 'best', 'latest' or a step number")


def _read_lines(path: str, unit: str) -> list[str]:
  """The lines of `path` (local or gs://...; '-' = stdin), refused when empty or not UTF-8 (`source_lines`)."""
  from etils import epath

  from jformer.decode.translator import source_lines

  return (source_lines(sys.stdin.buffer.read(), "stdin", unit) if path == "-"
          else source_lines(epath.Path(path).read_bytes(), path, unit))


def _write_lines(outputs, path: str) -> None:
  """One output per line to `path` (local or gs://...; '-' = stdout), line i answering input line i: a newline
  inside an output (a language model's paragraph break) is written as the two characters \\n."""
  from etils import epath

  text = "".join(out.replace("\n", "\\n") + "\n" for out in outputs)
  if path == "-":
    sys.stdout.write(text)
  else:
    epath.Path(path).write_text(text, encoding="utf-8")


def _translate_arguments(parser):
  parser.add_argument("--workdir", required=True, help="the --workdir of a training run")
  parser.add_argument("--input", default="-", help="file of source lines, local or gs://... ('-' = stdin)")
  parser.add_argument("--output", default="-", help="file for the translations, local or gs://... ('-' = stdout)")
  _checkpoint_argument(parser)


@command("translate", "translate source lines (stdin or --input) with a trained run")
def translate(args, overrides):
  import jax

  from jformer import checkpoint
  from jformer import config as config_lib
  from jformer import data, tasks
  from jformer.decode.translator import make_translator

  _quiet_logs()
  config = config_lib.load_run(args.workdir, overrides)
  lines = _read_lines(args.input, "sentence")
  model = tasks.build_model(config)
  params, which = checkpoint.run_params(args.workdir, args.checkpoint, model=model)
  translator = make_translator(config, model, params, data.load_tokenizer(config, args.workdir))
  print(f"jformer translate: translating with {which}", file=sys.stderr)  # stdout holds only the translations.
  _write_lines(translator(lines, rng=jax.random.PRNGKey(config.train.seed)), args.output)


translate.add_arguments = _translate_arguments


def _generate_arguments(parser):
  parser.add_argument("--workdir", required=True, help="the --workdir of a language model's training run")
  parser.add_argument("--input", default="-", help="file of prompts, local or gs://... ('-' = stdin)")
  parser.add_argument("--output", default="-", help="file for the continuations, local or gs://... ('-' = stdout)")
  _checkpoint_argument(parser)
  parser.add_argument("--max_new_tokens", type=int, default=50, help="most tokens added to each prompt")
  parser.add_argument("--method", help="decoding method: beam, greedy or sample (default: the run's decode.method)")
  for flag, kind in (("temperature", float), ("top_k", int), ("top_p", float), ("beam_size", int), ("alpha", float),
                     ("batch_size", int)):
    parser.add_argument(f"--{flag}", type=kind, help=f"default: the run's decode.{flag}")
  parser.add_argument("--seed", type=int, help="sampling seed (default: the run's train.seed); prompt i draws with "
                      "fold_in(seed, i), the same whatever the batching")


@command("generate", "continue prompts (stdin or --input, one per line; empty = unconditional) with a trained "
         "language model")
def generate(args, overrides):
  import jax

  from jformer import checkpoint
  from jformer import config as config_lib
  from jformer import data, tasks
  from jformer.decode.generator import make_generator

  _quiet_logs()
  config = config_lib.load_run(args.workdir, overrides)
  lines = _read_lines(args.input, "prompt")
  model = tasks.build_model(config)
  options = {k: getattr(args, k) for k in ("method", "temperature", "top_k", "top_p", "beam_size", "alpha",
                                           "batch_size")}
  params, which = checkpoint.run_params(args.workdir, args.checkpoint, model=model)
  generator = make_generator(config, model, params, data.load_tokenizer(config, args.workdir),
                             max_new_tokens=args.max_new_tokens, **options)  # checks the options first.
  print(f"jformer generate: continuing with {which}", file=sys.stderr)  # stdout holds only the continuations.
  seed = config.train.seed if args.seed is None else args.seed
  _write_lines(generator(lines, rng=jax.random.PRNGKey(seed)), args.output)


generate.add_arguments = _generate_arguments


def _average_arguments(parser):
  parser.add_argument("--workdir", required=True, help="the --workdir of a training run")
  parser.add_argument("--last", type=int, default=5, help="average the newest N checkpoints (paper: 5 base, 20 big)")


@command("average-checkpoints", "write the mean parameters of the last N checkpoints to <workdir>/averaged")
def average_checkpoints(args, overrides):
  from jformer import checkpoint
  from jformer import config as config_lib

  _quiet_logs()
  # Refuses overrides that do not fit the run, as on every command; runs no model, so on any backend.
  config_lib.load_run(args.workdir, overrides, backend=None)
  params, steps = checkpoint.average_params(checkpoint.checkpoints_dir(args.workdir), last=args.last)
  path = checkpoint.averaged_dir(args.workdir)
  checkpoint.save_params(path, params, overwrite=True)
  print(f"averaged steps {steps} -> {path}")


average_checkpoints.add_arguments = _average_arguments


def _evaluate_arguments(parser):
  parser.add_argument("--workdir", required=True, help="the --workdir of a training run")
  parser.add_argument("--split", default="valid", choices=["valid", "test"], help="the split to score")
  _checkpoint_argument(parser)


@command("evaluate", "score a trained run on a split (translation: loss, perplexity, BLEU; language model: bits per "
         "byte); --config.data.max_length=N scores another context length")
def evaluate(args, overrides):
  from jformer.train.evaluation import evaluate_run, result_line

  _quiet_logs()
  results, path = evaluate_run(args.workdir, overrides, split=args.split, which=args.checkpoint)
  print(f"{result_line(results)}; written to {path}")


evaluate.add_arguments = _evaluate_arguments


def _report_card_arguments(parser):
  parser.add_argument("--workdir", default=None,
                      help="folder of the card's runs and files (default: runs/report_card/<variant>); finished "
                      "runs there are reused")
  parser.add_argument("--seeds", type=int, default=2,
                      help="seeds per training part (train.seed 0..N-1): the card shows their mean, and calls a "
                      "difference better or worse only beyond their spread")
  parser.add_argument("--leaderboard", action="store_true",
                      help="grade every row of the board not yet graded at this suite version (each written to "
                      "docs/results/report_cards/<row>.json as it finishes); with a variant, then print its row "
                      "ranked among the board's")
  parser.add_argument("--remeasure", action="store_true",
                      help="also grade dot_product here (in the workdir's sibling dot_product/) and cache its card "
                      "in docs/results/report_cards/ with this machine, date and commit")


@command("report-card", "grade an attention variant (--config.model.attention=..., --config.imports=my_file.py) on "
         "synthetic recall tasks, LM bits per byte, step time, memory and decode speed, beside dot_product's card")
def report_card(args, overrides):
  from jformer.train.preemption import Preempted, stop_at_once

  _quiet_logs()
  try:
    with stop_at_once("while grading"):  # a training part saves a step and stops on its own (then raises too).
      _grade_and_write(args, overrides)
  except Preempted as stop:
    print(f"report card preempted {stop}; run the same command to resume (finished parts are reused)")


def _grade_and_write(args, overrides):
  """`jformer report-card`'s work: grades the variant beside the baseline and writes the card; with --leaderboard,
  first the board's rows not yet graded (each saved as it finishes), then the variant's row ranked among them."""
  from etils import epath

  from jformer import report_card as rc
  from jformer.report_card import leaderboard
  from jformer.train.progress import format_duration

  start = time.perf_counter()
  if args.leaderboard:
    root = epath.Path(args.workdir or "runs/report_card")
    leaderboard.build(lambda row: _graded_beside_baseline(rc, row, root / rc.variant_name(row), args))
    if not overrides:
      print(leaderboard.ranking())
      return
  overrides = overrides or dict(rc.BASELINE)
  rc.check_variant(overrides)
  name = rc.variant_name(overrides)
  workdir = epath.Path(args.workdir or f"runs/report_card/{name}")
  if args.leaderboard:
    workdir = epath.Path(args.workdir or "runs/report_card") / name
  card, baseline = _graded_beside_baseline(rc, overrides, workdir, args)
  paths = rc.write(card, None if card is baseline else baseline, workdir)
  print("\n".join(line for line in open(paths["report_card.md"]).read().splitlines() if not line.startswith("![")))
  print("written: " + ", ".join(paths.values()))
  print(f"report card {name}: {format_duration(time.perf_counter() - start)} of wall time, {card['seeds']} seeds")
  if args.leaderboard:
    print(leaderboard.ranking(card))


def _graded_beside_baseline(rc, overrides, workdir, args):
  """(the variant's card, the baseline's column): the baseline's cached card at this suite version for its learning
  figures, with its time and memory measured here; graded here in full (and cached) with --remeasure or when no card
  of this version is cached."""
  name, baseline_name = rc.variant_name(overrides), rc.variant_name(rc.BASELINE)
  baseline = rc.cached_row(baseline_name)  # at this suite version, else None.
  expected = baseline["seconds"] if baseline else None
  command = shlex.join(["jformer", "report-card", *sys.argv[2:]])
  graded_here = args.remeasure or baseline is None
  if graded_here:  # the baseline graded here first (in the variant's own workdir when it is the baseline).
    if baseline is None and not args.remeasure:
      print(f"no {baseline_name} card is cached at suite version {rc.SUITE_VERSION}: grading it here first")
    baseline = rc.grade(rc.BASELINE, workdir if name == baseline_name else workdir.parent / baseline_name,
                        seeds=args.seeds, expected=expected, command=command)
    print(f"cached {rc.save_row(baseline)}")
  else:  # its time and memory measured here, beside the variant's; its learning figures cached.
    suite = rc.card.default_suite()  # the suite grade() reads (a test may shorten it there)
    here = rc.grade(rc.BASELINE, workdir.parent / baseline_name, suite=suite.measurements(), command=command)
    baseline = rc.beside(baseline, here, suite)
  card = (baseline if graded_here and name == baseline_name else
          rc.grade(overrides, workdir, seeds=args.seeds, expected=expected, command=command))
  return card, baseline


report_card.add_arguments = _report_card_arguments


def _import_hf_arguments(parser):
  parser.add_argument("source", help="a folder in the Hugging Face layout (config.json, model.safetensors, "
                      "tokenizer.json, tokenizer.model or Marian's *.spm + vocab.json), or a Hub model id ORG/NAME when online")
  parser.add_argument("--workdir", required=True, help="the new run's folder")
  _dtype_argument(parser, "the parameters' dtype in the run (default: the checkpoint's own, bfloat16 stays bfloat16)")


def _dtype_argument(parser, help_text: str):
  parser.add_argument("--dtype", default=None, help=f"float32, bfloat16 or float16: {help_text}")


@command("import-hf", "write a run's workdir from a Hugging Face checkpoint (Llama, Mistral, Qwen2, Qwen3, GPT-2, "
         "Marian): generate or translate, evaluate and train (fine-tune) work on it; --config.KEY=VALUE sets its "
         "data and training keys")
def import_hf(args, overrides):
  from jformer import interop

  _quiet_logs()
  config = interop.import_hf(args.source, args.workdir, overrides, dtype=args.dtype)
  layers = "+".join(str(n) for n in (config.model.num_encoder_layers, config.model.num_decoder_layers) if n)
  print(f"imported {args.source} -> {args.workdir}: {layers} layers, d_model "
        f"{config.model.d_model}, vocabulary {config.model.vocab_size}")


import_hf.add_arguments = _import_hf_arguments


def _export_hf_arguments(parser):
  parser.add_argument("--workdir", required=True, help="a run imported by import-hf (fine-tuned or not)")
  parser.add_argument("out", help="the new folder to write (config.json, model.safetensors or its shards, tokenizer "
                      "files)")
  _checkpoint_argument(parser)
  _dtype_argument(parser, "the tensors' dtype (default: the parameters' own: float32 once fine-tuned)")
  parser.add_argument("--max_shard_size", default="5GB", help="the largest shard (transformers' units: 5GB is 5e9 "
                      "bytes, 5GiB 5*2^30); a model that fits in one is written as model.safetensors")


@command("export-hf", "write a run imported by import-hf back as a Hugging Face folder (from_pretrained loads it)")
def export_hf(args, overrides):
  from jformer import config as config_lib
  from jformer import interop

  _quiet_logs()
  config_lib.load_run(args.workdir, overrides)  # refuses overrides that do not fit the run, as on every command.
  files = interop.export_hf(args.workdir, args.out, args.checkpoint, dtype=args.dtype,
                            max_shard_size=args.max_shard_size)
  print(f"exported {args.workdir} -> {args.out}: {', '.join(files)}")


export_hf.add_arguments = _export_hf_arguments


def _quiet_logs():
  """Keeps the console for progress lines (absl's level is `--verbosity`'s, set by `main`): no tfds progress bars,
  no warning from Orbax that a checkpoint directory opened read-only (to translate, average) is read-only, nor from
  tfds that a folder dataset (`parallel_text`, `text`) has its own builder config."""
  from absl import logging

  noise = ("Given directory is read only", "Using custom data configuration")  # Orbax; tfds, for our folder builders.
  logging.get_absl_logger().addFilter(lambda record: not record.getMessage().startswith(noise))
  import tensorflow_datasets as tfds

  tfds.disable_progress_bar()


def _summary_arguments(parser):
  parser.add_argument("--config", required=True, help="config file, e.g. configs/demo.py")
  parser.add_argument("--depth", type=int, default=3, help="module nesting shown in the table")
  parser.add_argument("--forward", action="store_true", help="also run one forward pass on a random batch")


@command("summary", "print parameters per module and in total")
def summary(args, overrides):
  import jax
  import jax.numpy as jnp

  from jformer import config as config_lib
  from jformer import tasks
  from jformer.models import summary as summary_lib
  from jformer.config.adaptive import adapt

  config = adapt(config_lib.load(args.config, overrides), fixed=overrides)  # as `train` would start it.
  model = tasks.build_model(config)
  counts = summary_lib.count_by_module(summary_lib.param_shapes(model), depth=args.depth)
  print(f"config: {args.config}  (architecture={config.model.get('architecture')}, "
        f"attention={config.model.attention}, positional={config.model.positional}, norm={config.model.norm})")
  print(summary_lib.format_summary(counts))
  print(f"total parameters: {counts['total'] / 1e6:.2f}M")
  if args.forward:
    rng = jax.random.PRNGKey(0)
    length = min(32, config.model.max_length)
    tokens = jax.random.randint(rng, (2, length), 1, config.model.vocab_size)
    inputs, _ = model.call_arguments({"inputs": tokens, "targets": tokens})
    params = jax.jit(model.init)(rng, *inputs)
    start = time.perf_counter()
    logits = jax.block_until_ready(jax.jit(model.apply)(params, *inputs))
    print(f"forward pass: inputs {tuple(tokens.shape)} -> logits {tuple(logits.shape)}, "
          f"mean {float(logits.mean()):.4f}, std {float(logits.std()):.4f}, finite={bool(jnp.isfinite(logits).all())}"
          f" ({time.perf_counter() - start:.2f}s incl. compile)")


summary.add_arguments = _summary_arguments


def _print_plugins(registry) -> None:
  """One entry per registered plug-in: its name, its one-line description, then its options and learned
  parameters where its kind has them."""
  import inspect

  for name, entry in registry.items():
    options = ", ".join(option if default is inspect.Parameter.empty else f"{option}={default!r}"
                        for option, default in getattr(entry, "options", {}).items())
    learns = ", ".join(f"{param} [{', '.join(map(str, spec.shape))}]"
                       for param, spec in getattr(entry, "params", {}).items())
    details = "; ".join(part for part in (registry.details(name), options and f"options: {options}",
                                          learns and f"learns: {learns}") if part)
    print(f"{name:<20} {registry.doc(name)}" + (f"\n{'':<20} {details}" if details else ""))


def _kinds(command: str, overrides: dict) -> dict:
  """Every plug-in registry by kind, all plug-in packages imported and the plug-ins of `--config.imports`; any
  other override is refused (`command` lists, it reads no other config key)."""
  from jformer import attention, data, interop, positional, registry, tasks  # noqa: F401 (their registrations)
  from jformer import config as config_lib

  ignored = sorted(key for key in overrides if key != "imports")
  if ignored:
    raise ValueError(f"--config.{ignored[0]} is not read by {command}, which only lists plug-ins; drop it (give "
                     "--config.imports=path/to/file.py to list your own plug-ins too)")
  config_lib.import_plugins(overrides.get("imports", ""))
  return registry.kinds()


def _list_arguments(parser):
  parser.add_argument("kind", nargs="?", help="a plug-in kind: attention variant, positional encoding, "
                      "normalization, activation, dataset, task, pretrained architecture (default: every kind); "
                      "--config.imports=path/to/file.py lists your plug-ins too")


@command("list", "list the registered plug-ins of every kind (or of one): attention variants, positional "
         "encodings, normalizations, activations, datasets, tasks")
def list_command(args, overrides):
  kinds = _kinds("jformer list", overrides)
  chosen = [k for k in kinds if args.kind in (None, k, k.split()[0])]
  if not chosen:
    raise ValueError(f"unknown plug-in kind '{args.kind}'; kinds: {sorted(kinds)}")
  for kind in chosen:
    print(f"{kind}s:")
    _print_plugins(kinds[kind])


list_command.add_arguments = _list_arguments


def _list_action(parser):
  parser.add_argument("action", choices=["list"], help="'list': the registered names, what each does and takes")


@command("attention", "list the registered attention variants (= jformer list attention)")
def attention_command(args, overrides):
  _print_plugins(_kinds("jformer attention list", overrides)["attention variant"])


@command("positional", "list the registered positional encodings (= jformer list positional)")
def positional_command(args, overrides):
  _print_plugins(_kinds("jformer positional list", overrides)["positional encoding"])


attention_command.add_arguments = positional_command.add_arguments = _list_action


def _visualize_arguments(parser):
  parser.add_argument("--workdir", required=True, help="the --workdir of a training run (encoder-decoder)")
  parser.add_argument("--text", required=True, help="the source sentence to translate and show")
  parser.add_argument("--out", default="", help="folder for the PNGs (default <workdir>/attention)")
  _checkpoint_argument(parser)


@command("visualize-attention", "plot attention maps (encoder self, decoder self, cross; per layer and head) of a "
         "sentence and its translation")
def visualize_attention(args, overrides):
  import jax
  from etils import epath

  from jformer import checkpoint
  from jformer import config as config_lib
  from jformer import data, tasks, visualize

  _quiet_logs()
  config = config_lib.load_run(args.workdir, overrides)
  model = tasks.build_model(config)
  params = checkpoint.load_run_params(args.workdir, args.checkpoint, model=model)
  maps = visualize.attention_maps(config, model, params, data.load_tokenizer(config, args.workdir), args.text,
                                  rng=jax.random.PRNGKey(config.train.seed))
  out = args.out or epath.Path(args.workdir) / "attention"
  paths = visualize.write_attention_maps(maps, out)
  print(f"{args.text}\n-> {maps.translation}\nsource pieces: {' '.join(maps.source)}\n"
        f"target pieces: {' '.join(maps.target)}\nwrote {len(paths)} attention maps and attention.npz to {out}")


visualize_attention.add_arguments = _visualize_arguments


# Sub-commands implemented by the launch/ package, which parses its own flags.
DELEGATED = {
    "launch": ("launch.cli", "run a sweep file's points locally, on SLURM or on a TPU pod (python -m launch)"),
    "sweep-report": ("launch.report", "one table and learning-curve plot of a sweep's points (python -m launch.report)"),
}


def parse(argv):
  """Splits argv into (parsed sub-command args, {dotted config key: string value})."""
  parser = argparse.ArgumentParser(
      prog="jformer", description="jformer: the Transformer of 'Attention Is All You Need' in JAX/Flax.",
      epilog="Config values are overridden with --config.<key>=<value>, e.g. --config.model.num_heads=16.")
  sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
  for name, (fn, help_text) in COMMANDS.items():
    sub_parser = sub.add_parser(name, help=help_text, description=help_text)
    fn.add_arguments(sub_parser)
    sub_parser.add_argument("--verbose", action="store_true",
                            help="show the traceback of an error, not just its message")
    sub_parser.add_argument("--verbosity", choices=VERBOSITIES, default="warning",
                            help="absl log level shown (default warning); info adds which kernel runs each "
                            "attention call and why")
  for name, (_, help_text) in DELEGATED.items():
    sub.add_parser(name, help=help_text, add_help=False)
  args, rest = parser.parse_known_args(argv)
  overrides = {}
  for item in rest:
    key, sep, value = item.partition("=")
    if not key.startswith("--config.") or not sep:
      parser.error(f"unrecognised argument '{item}' (config overrides look like --config.model.d_model=256)")
    overrides[key[len("--config."):]] = value
  return args, overrides


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  if argv and argv[0] in DELEGATED:
    import importlib

    sys.exit(importlib.import_module(DELEGATED[argv[0]][0]).main(argv[1:]))
  args, overrides = parse(argv)
  fn, _ = COMMANDS[args.command]
  from absl import logging

  logging.set_verbosity(args.verbosity)
  runtime.configure_host_allocator()  # before JAX starts its threads.
  runtime.configure_compilation_cache()  # before the first compilation.
  try:
    if getattr(args, "workdir", None) == "":  # `--workdir=` (an unset shell variable): not the current folder.
      raise ValueError("--workdir is empty; give the run's folder, e.g. --workdir=runs/demo (--workdir=. for the "
                       "current folder)")
    fn(args, overrides)
  except (KeyError, ValueError, TypeError, FileNotFoundError, FloatingPointError) as e:
    if getattr(args, "verbose", False):
      raise
    message = e.args[0] if isinstance(e, KeyError) and e.args else e
    sys.exit(f"jformer {args.command}: error: {message}")


if __name__ == "__main__":
  main()
