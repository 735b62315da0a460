"""Tasks: what a run trains for, chosen by `config.model.architecture` (a registry like every plug-in kind).

    "transformer" -> TranslationTask    pairs; eval loss, accuracy, perplexity; test BLEU (decoded with config.decode)
    "lm"          -> LanguageModelTask  documents; eval loss, accuracy, perplexity, bits per byte; the xz baseline;
                                        test bits per byte at data.max_length and at each train.eval_lengths
    "synthetic"   -> SyntheticTask      generated rows (mqar, induction, ...); loss, accuracy and exact match of the
                                        answer positions only (`targets_weights`)

The train loop (`jformer.train.loop`) and `jformer evaluate` (`jformer.train.evaluation`) only talk to a task:

    model = build_model(config, mesh=...)              # the one place a model is built
    task = make_task(config, workdir, tokenizer)       # task.datasets: this host's (.train, .describe(max_length))
    metrics = task.evaluate(eval_step, params, "valid")  # {name: float}, logged as eval/<name>
    task.eval_line(metrics)                            # 'loss 2.3456 | accuracy 0.512 | perplexity 10.44'
    task.kept_metrics, task.kept_value(name, metrics, model, host_params)  # what train.keep_best may keep, and
                                                       # its value at an evaluation (valid BLEU decodes a sample)
    task.test_every, task.test(model, params)          # periodic test during training (BLEU; none for an LM)
    task.final_results(model, params, eval_step)       # results.json entries of a finished run
    task.final_scalars(results)                        # of those, the TensorBoard test/ scalars
    task.summary(results)                              # 'BLEU 12.34' / 'eval bits per byte 1.2 (xz -9: 1.9), ...'
    task.score_split(model, params, eval_step, split)  # everything `jformer evaluate` reports for a split

`eval_step(params, batch) -> {nll_sum, correct, tokens}` sums over the (global) batch (`jformer.train.step`).
A task of one's own: a file with `@register("name", model=..., pairs=...)` on a class with these methods, loaded
with `--config.imports`.
"""

from jformer.tasks.language_model import LanguageModelTask
from jformer.tasks.registry import REGISTRY, TaskEntry, available, build_model, get, make_task, register
from jformer.tasks.synthetic import SyntheticTask
from jformer.tasks.translation import TranslationTask

__all__ = ["REGISTRY", "LanguageModelTask", "SyntheticTask", "TaskEntry", "TranslationTask", "available",
           "build_model", "get", "make_task", "register"]
