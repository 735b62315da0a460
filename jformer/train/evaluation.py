"""`jformer evaluate`: scores a trained run on a split at a context length, by the run's task (`jformer.tasks`).

    jformer evaluate --workdir=runs/lm --split=test --config.data.max_length=1024

Translation: loss, accuracy, perplexity (teacher-forced, rows of data.max_length) and BLEU (decoded with the run's
`config.decode`); language model: loss, accuracy, perplexity and bits per byte (each document read in pieces of at
most data.max_length tokens), and for the valid split the xz baseline; synthetic task: loss, accuracy, perplexity and
exact match of the answer positions. The results go to
`<workdir>/evaluate_<split>_<max_length>.json`.
"""

from __future__ import annotations

import jax
from etils import epath

from jformer import checkpoint, data, tasks
from jformer import config as config_lib
from jformer.train.progress import write_json
from jformer.train.step import make_eval_step

SPLITS = ("valid", "test")


def evaluate_run(workdir: epath.PathLike, overrides: dict | None = None, *, split: str = "valid",
                 which: str = "auto") -> tuple[dict, epath.Path]:
  """Scores the run in `workdir` with the parameters `which` names (`checkpoint.load_run_params`; recorded with what
  it resolved to, `checkpoint_used`: 'averaged', 'latest' or a step) on `split`.

  `overrides` may change `config.EVAL_KEYS` (data.max_length, up to model.max_length) and the keys a run may change
  (decode settings, eval batch size); other run keys are refused. Runs on this host's devices (one process).

  Returns:
    (results, the path of the JSON file they were written to).
  """
  if split not in SPLITS:
    raise ValueError(f"unknown split '{split}'; evaluate one of {SPLITS}")
  settings = config_lib.run_settings(config_lib.load_run(workdir, overrides, may_change=config_lib.EVAL_KEYS))
  config, length = settings.config, settings.data.max_length  # the config, for the task's layers to read.
  model = tasks.build_model(config)
  used = checkpoint.which_params(workdir, which)  # resolved once: a fallback is said once, and recorded.
  params = checkpoint.load_run_params(workdir, used, model=model)
  task = tasks.make_task(config, workdir, data.load_tokenizer(config, workdir))
  step = jax.jit(make_eval_step(model))
  results = task.score_split(model, params, lambda p, batch: jax.device_get(step(p, batch)), split)
  results = {"split": split, "max_length": length, "checkpoint": which, "checkpoint_used": used, **results}
  path = epath.Path(workdir) / f"evaluate_{split}_{length}.json"
  write_json(path, results)
  return results, path


def result_line(results: dict) -> str:
  """One line of `evaluate_run`'s results, e.g. 'test at 256 tokens: loss 2.1 | ... | bits per byte 1.23'."""
  values = " | ".join(f"{key.replace('_', ' ')} {value:.4f}" for key, value in results.items()
                      if isinstance(value, float) and key not in ("decode_seconds",))
  which, used = results["checkpoint"], results.get("checkpoint_used", results["checkpoint"])
  label = which if used in (which, "latest") else f"{which}: {f'step {used}' if used.isdigit() else used}"
  return f"{results['split']} at {results['max_length']} tokens ({label} checkpoint): {values}"
