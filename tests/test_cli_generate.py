"""`jformer generate` on a language-model workdir, and `translate`/`generate` refusing the other task's run.

The workdirs are built without training (`helpers.untrained_run`), so this does not depend on the LM data pipeline.
"""

from __future__ import annotations

import io
import sys

import pytest

from helpers import untrained_run
from jformer import main
from jformer.decode.generator import Generator

pytestmark = pytest.mark.integration  # the commands end to end on run folders.


@pytest.fixture(scope="module")
def lm_run(tiny_corpus, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("generate") / "lm"
  return workdir, untrained_run(workdir, tiny_corpus, "lm")


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
  untrained_run(translation, tiny_corpus, "transformer")
  assert refused(["generate", f"--workdir={translation}"], monkeypatch) == (
      "jformer generate: error: this run is a translation model (model.architecture='transformer'), which needs a "
      "source sentence to decode from: use `jformer translate`.")
