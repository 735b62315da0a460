"""`jformer generate` on a language-model workdir, and `translate`/`generate` refusing the other task's run.

The workdirs are built without training (so this does not depend on the LM data pipeline): the config written as
`jformer train` writes it, a SentencePiece vocabulary trained on the tiny corpus where the run keeps it, and random
parameters saved as the run's averaged checkpoint (what `--checkpoint=auto` reads first).
"""

from __future__ import annotations

import io
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from helpers import REPO, tiny_overrides
from jformer import checkpoint, data, main, tasks
from jformer import config as config_lib
from jformer.decode.generator import Generator
from jformer.train.loop import write_config

pytestmark = pytest.mark.integration  # the commands end to end on run folders.


def build_run(workdir, corpus, architecture: str):
  """A run folder `jformer translate`/`generate` can read: config.json, vocabulary, averaged parameters."""
  config = config_lib.load(REPO / "configs" / "small.py", {**tiny_overrides(corpus), "model.architecture": architecture})
  workdir.mkdir(parents=True)
  write_config(config, workdir)
  texts = [line for name in ("train.src", "train.tgt") for line in (corpus / name).read_text().splitlines()]
  tokenizer = data.get_tokenizer(data.vocab_path(config, workdir), lambda: texts, vocab_size=config.model.vocab_size)
  model = tasks.build_model(config)
  tokens = jnp.ones((1, 8), jnp.int32)
  args, kwargs = model.call_arguments({"inputs": tokens, "targets": tokens})
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), *args, **kwargs))["params"]
  checkpoint.save_params(checkpoint.averaged_dir(workdir), params)
  return model, params, tokenizer


@pytest.fixture(scope="module")
def lm_run(tiny_corpus, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("generate") / "lm"
  return workdir, build_run(workdir, tiny_corpus, "lm")


def run(argv, stdin: bytes, monkeypatch, capsys) -> str:
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
  main.main([str(a) for a in argv])
  return capsys.readouterr().out


def refused(argv, monkeypatch) -> str:
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(PROMPTS), encoding="utf-8"))
  with pytest.raises(SystemExit) as exit_info:
    main.main([str(a) for a in argv])
  return exit_info.value.code


PROMPTS = b"Save the file\n\nOpen the file\n"


def test_generate_continues_each_prompt_line(lm_run, monkeypatch, capsys):
  """One continuation per line (the empty line an unconditional one), as the Generator gives it with the run's
  parameters; greedy by --method, sampling reproducible by --seed."""
  workdir, (model, params, tokenizer) = lm_run
  greedy = run(["generate", f"--workdir={workdir}", "--method=greedy", "--max_new_tokens=6"], PROMPTS, monkeypatch,
               capsys)
  want = Generator(model, params, tokenizer, max_new_tokens=6, method="greedy")(PROMPTS.decode().splitlines())
  assert greedy == "".join(f"{line}\n" for line in want)
  assert len(greedy.split("\n")) == 4 and all(want)

  sample = ["generate", f"--workdir={workdir}", "--method=sample", "--temperature=1.5", "--max_new_tokens=6"]
  first, again, other = (run(sample + [f"--seed={seed}"], PROMPTS, monkeypatch, capsys) for seed in (3, 3, 4))
  assert first == again and first != greedy and other != first


def test_each_command_refuses_the_other_task(lm_run, tiny_corpus, tmp_path, monkeypatch):
  workdir, _ = lm_run
  assert refused(["translate", f"--workdir={workdir}"], monkeypatch) == (
      "jformer translate: error: this run is a language model (model.architecture='lm'), which continues text "
      "instead of translating it: use `jformer generate`.")
  translation = tmp_path / "translation"
  build_run(translation, tiny_corpus, "transformer")
  assert refused(["generate", f"--workdir={translation}"], monkeypatch) == (
      "jformer generate: error: this run is a translation model (model.architecture='transformer'), which needs a "
      "source sentence to decode from: use `jformer translate`.")
