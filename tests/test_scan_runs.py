"""Scanned runs end to end: a run trained with `model.scan_layers=True` reports its final BLEU, and `jformer
translate` and `jformer generate` on it give the looped run's outputs (the same parameters unstacked,
`unstack_layer_params`), greedy and beam."""

from __future__ import annotations

import io
import json
import shutil
import sys

import pytest

from helpers import SMALL, final_params, tiny_overrides
from jformer import checkpoint, main
from jformer import config as config_lib
from jformer.models import unstack_layer_params

pytestmark = pytest.mark.integration  # trained runs and the commands on them.

SCANNED = {"model.scan_layers": True, "model.num_encoder_layers": 2, "model.num_decoder_layers": 2,
           "model.norm": "pre", "model.tie_output_embedding": False, "train.steps": 4, "train.eval_every": 4,
           "train.checkpoint_every": 4, "train.bleu_examples": 8}


def train(workdir, overrides: dict) -> dict:
  main.main(["train", f"--config={SMALL}", f"--workdir={workdir}",
             *(f"--config.{key}={value}" for key, value in overrides.items())])
  return json.loads((workdir / "results.json").read_text())


def looped_copy(scanned, looped) -> None:
  """`looped`: the run folder of `scanned` with `model.scan_layers=False` and its last parameters unstacked as the
  run's averaged parameters (what `--checkpoint=auto` reads first); its stacked checkpoints left out."""
  shutil.copytree(scanned, looped, ignore=shutil.ignore_patterns("checkpoints"))
  written = json.loads((looped / "config.json").read_text())
  written["model"]["scan_layers"] = False
  (looped / "config.json").write_text(json.dumps(written))
  config_lib.record_config(looped)
  _, params = final_params(scanned)
  checkpoint.save_params(checkpoint.averaged_dir(looped), unstack_layer_params(params))


def command(argv, stdin: str, monkeypatch, capsys) -> str:
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8"))
  capsys.readouterr()
  main.main([str(a) for a in argv])
  return capsys.readouterr().out


def outputs(name, workdir, stdin, monkeypatch, capsys, **flags) -> dict:
  """{method: the command's output} for greedy and beam search (`flags[method]`: the command's flags for it)."""
  return {method: command([name, f"--workdir={workdir}", *flags[method]], stdin, monkeypatch, capsys)
          for method in ("greedy", "beam")}


PROMPTS = "Save the file\n\nOpen the\n"
SOURCES = "Open the file\nSave the document as\n\nThe file could not be opened\n"


def test_translate_on_a_scanned_run_gives_the_looped_runs_translations(tiny_corpus, tmp_path, monkeypatch,
                                                                       capsys):
  scanned, looped = tmp_path / "scanned", tmp_path / "looped"
  results = train(scanned, tiny_overrides(tiny_corpus, **SCANNED))
  assert results["bleu"] is not None and results["bleu_examples"] == 8  # the final BLEU decoded the scanned model.
  looped_copy(scanned, looped)
  flags = {method: [f"--config.decode.method={method}"] for method in ("greedy", "beam")}
  want = outputs("translate", looped, SOURCES, monkeypatch, capsys, **flags)
  got = outputs("translate", scanned, SOURCES, monkeypatch, capsys, **flags)
  assert got == want
  lines = want["beam"].split("\n")
  assert len(lines) == 5 and lines[2] == "" and all(lines[i] for i in (0, 1, 3))


def test_generate_on_a_scanned_run_gives_the_looped_runs_continuations(text_corpus, tmp_path, monkeypatch, capsys):
  scanned, looped = tmp_path / "scanned", tmp_path / "looped"
  lm = {"model.architecture": "lm", "data.dataset": "text", "data.path": str(text_corpus),
        "data.data_dir": str(text_corpus.parent / "tfds"), "data.max_length": 16, "model.max_length": 32,
        "model.vocab_size": 400, "model.positional": "rotary", "train.steps": 40, "train.eval_every": 40,
        "train.checkpoint_every": 40, "optimizer.learning_rate_scale": 4.0}
  train(scanned, {**tiny_overrides(text_corpus), **SCANNED, **lm})
  looped_copy(scanned, looped)
  flags = {"greedy": ["--method=greedy", "--max_new_tokens=6"],
           "beam": ["--method=beam", "--beam_size=3", "--max_new_tokens=6"]}
  want = outputs("generate", looped, PROMPTS, monkeypatch, capsys, **flags)
  got = outputs("generate", scanned, PROMPTS, monkeypatch, capsys, **flags)
  assert got == want
  lines = want["greedy"].split("\n")
  assert len(lines) == 4 and len(set(lines[0].split())) >= 2, want  # words, not one repeated or spaces only.
