"""A checkpoint of another model (other shapes) in a run's folder: one line naming the step, the parameter, both
shapes and the config key that differs; a newer foreign step is skipped for the newest step that fits."""

import shutil

import pytest
from helpers import REPO, tiny_overrides

from jformer import main

pytestmark = pytest.mark.integration


def args(command, workdir, corpus, **extra) -> list[str]:
  config = [f"--config={REPO / 'configs' / 'small.py'}"] if command == "train" else []
  flags = [f"--config.{key}={value}" for key, value in tiny_overrides(corpus, **extra).items()]
  return [command, *config, f"--workdir={workdir}", *(flags if command == "train" else [])]


def test_a_foreign_checkpoint_is_named_and_skipped_for_one_that_fits(tiny_corpus, tmp_path, capsys, caplog):
  small, wide = tmp_path / "small", tmp_path / "wide"
  main.main(args("train", small, tiny_corpus))  # d_model 32: steps 3 and 6
  main.main(args("train", wide, tiny_corpus, **{"model.d_model": 64, "train.steps": 3}))  # d_model 64: step 3
  shutil.copytree(small / "checkpoints" / "6", wide / "checkpoints" / "6")  # a newer step of the other model
  capsys.readouterr()

  main.main(["evaluate", f"--workdir={wide}"])  # skips step 6, evaluates step 3
  said = caplog.text
  assert ("checkpoint(s) that do not fit this model: step 6 (parameter decoder/layer_0/cross_attention/key/kernel is "
          "[32, 2, 16] there and [64, 2, 32] in this model: model.d_model (32 there, 64 here)") in said
  assert f"in {wide / 'checkpoints'}; restoring step 3 instead" in said  # evaluate reads only: nothing moved.
  assert (wide / "checkpoints" / "6").is_dir() and "valid at 32 tokens (auto checkpoint)" in capsys.readouterr().out

  with pytest.raises(SystemExit) as stop:
    main.main(["evaluate", f"--workdir={wide}", "--checkpoint=6"])
  assert stop.value.code.startswith(f"jformer evaluate: error: checkpoint 6 in {wide / 'checkpoints'} does not fit "
                                    "this model: parameter decoder/layer_0/cross_attention/key/kernel is [32, 2, 16] "
                                    "there and [64, 2, 32] in this model")
  assert "\n" not in stop.value.code and "strict" not in stop.value.code

  main.main(args("train", wide, tiny_corpus, **{"model.d_model": 64, "train.steps": 6}))  # trains on from step 3
  assert (wide / "checkpoints" / "6.foreign").is_dir() and (wide / "checkpoints" / "6").is_dir()
  assert "resumed from step 3" in capsys.readouterr().out

  shutil.rmtree(wide / "checkpoints" / "3")
  shutil.rmtree(wide / "checkpoints" / "6")
  shutil.copytree(small / "checkpoints" / "6", wide / "checkpoints" / "6")
  (tmp_path / "source.txt").write_text("Save the file.\n")
  with pytest.raises(SystemExit) as stop:
    main.main(["translate", f"--workdir={wide}", f"--input={tmp_path / 'source.txt'}"])
  assert stop.value.code.startswith(f"jformer translate: error: no checkpoint in {wide / 'checkpoints'} fits this "
                                    "model: step 6 (parameter ")
