"""What a new user meets in the first hour, through the real command (a subprocess): one line naming the real cause
and the fix, exit 1, no traceback, and nothing left in the workdir that refuses the corrected command; and the
corrected command then works there."""

import shutil

import pytest
import xla_flags
from helpers import REPO, SMALL, assert_one_line_error, run_command, tiny_overrides

CONFIGS = REPO / "configs"


def flags(overrides: dict) -> list[str]:
  return [f"--config.{key}={value}" for key, value in overrides.items()]


@pytest.mark.integration  # a command in a subprocess each (seconds).
@pytest.mark.parametrize("args, fragments", [
    # A window of 0 in a layer kind names the kind's own key, not model.attention_options (which nobody set).
    ([f"--config={CONFIGS / 'lm_local_global.py'}",
      "--config.model.layer_kinds.local.attention_options.window_size=0"],
     ["layer kind 'local' (model.layer_kinds.local): attention variant 'local' needs a positive int window_size, got "
      "0 (--config.model.layer_kinds.local.attention_options.window_size)"]),
    # A workdir on the kernel's /proc: named as such, not "No such file or directory".
    ([f"--config={SMALL}", "--workdir=/proc/jformer_run"],
     ["--workdir /proc/jformer_run is under /proc, the kernel's proc file system, where no folder can be made; give "
      "a folder on a disk"]),
    # An empty --workdir= (an unset shell variable) does not train into the current folder.
    ([f"--config={SMALL}", "--workdir="], ["--workdir is empty; give the run's folder"]),
])
def test_bad_input_is_one_line_naming_the_real_cause_and_writes_nothing(tmp_path, args, fragments):
  workdir = [f"--workdir={tmp_path / 'run'}"] if not any(a.startswith("--workdir") for a in args) else []
  result = run_command(["train", *args, *workdir], cwd=tmp_path)
  assert_one_line_error(result.returncode, result.stderr, "jformer train: error: ", *fragments)
  assert list(tmp_path.iterdir()) == []  # nothing in the current folder, nor a workdir.


@pytest.mark.integration
def test_an_empty_train_split_with_a_recipe_is_the_datasets_line(tmp_path):
  """configs/lm_demo.py measures the corpus for its recipe before anything runs: an empty train.txt is named as a run
  without a recipe names it (not a ZeroDivisionError from the recipe)."""
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  (corpus / "train.txt").write_text("")
  for split in ("valid", "test"):
    (corpus / f"{split}.txt").write_text("A document.\n")
  result = run_command(["train", f"--config={CONFIGS / 'lm_demo.py'}", f"--workdir={tmp_path / 'run'}",
                        f"--config.data.path={corpus}"])
  assert_one_line_error(result.returncode, result.stderr, f"jformer train: error: {corpus / 'train.txt'} holds no "
                        "document (it is empty or only blank lines)", "fill it, or point data.path at another folder")
  assert not (tmp_path / "run").exists()


@pytest.mark.integration  # a tfds build and a vocabulary refused, then a tiny LM trained: ~40 s.
def test_lines_too_long_for_sentencepiece_are_named_and_the_fixed_text_trains_in_the_same_workdir(text_corpus,
                                                                                                   tmp_path):
  corpus = tmp_path / "corpus"
  corpus.mkdir()
  for split in ("valid", "test"):
    (corpus / f"{split}.txt").write_text((text_corpus / f"{split}.txt").read_text())
  documents = (text_corpus / "train.txt").read_text()
  (corpus / "train.txt").write_text(" ".join(documents.split()) + "\n")  # the whole text as one line.
  args = ["train", f"--config={SMALL}", f"--workdir={tmp_path / 'run'}", *flags({
      "model.architecture": "lm", "data.dataset": "text", "data.path": corpus, "data.max_length": 16,
      "data.batch_size": 8, "data.eval_batch_size": 8, "model.vocab_size": 400, "model.d_model": 32,
      "model.num_heads": 2, "model.d_ff": 64, "model.num_decoder_layers": 1, "model.max_length": 32,
      "train.steps": 2, "train.eval_every": 2, "train.checkpoint_every": 2, "train.eval_lengths": "(16,)"})]
  failed = run_command(args)
  assert_one_line_error(failed.returncode, failed.stderr, "SentencePiece training failed",
                        "SentencePiece skips lines longer than 4,192 bytes, and 1 of the 1 training lines are",
                        "whatever model.vocab_size: break the text into lines")
  assert not (tmp_path / "run" / "config.json").exists()
  (corpus / "train.txt").write_text(documents)  # the fix: lines of a paragraph each.
  fixed = run_command(args)
  assert fixed.returncode == 0, fixed.stderr
  assert "done: step 2" in fixed.stdout


@pytest.mark.integration  # two tiny runs' starts: ~90 s on 2 busy cores.
def test_a_run_resumed_on_fewer_devices_names_the_fix_which_resumes_it(tiny_corpus, tmp_path):
  """Saved at step 2 of 3 on 4 (simulated) devices with parallel.data=4, resumed on 1 by the same command: one line
  naming the mesh settings to give; given them, it resumes. `translate` then says which step it translates with."""
  workdir = tmp_path / "run"
  args = ["train", f"--config={SMALL}", f"--workdir={workdir}",
          *flags(tiny_overrides(tiny_corpus, **{"train.steps": 3, "train.checkpoint_every": 2,
                                                "train.eval_every": 3, "train.bleu_examples": 2}))]
  devices = lambda n: {"XLA_FLAGS": xla_flags.with_devices(n)}
  first = run_command([*args, "--config.parallel.data=4"], env=devices(4))
  assert first.returncode == 0, first.stderr
  shutil.rmtree(workdir / "checkpoints" / "3")  # as if stopped after saving step 2.
  (workdir / "results.json").unlink()
  refused = run_command([*args, "--config.parallel.data=4"], env=devices(1))
  assert_one_line_error(refused.returncode, refused.stderr, "mesh {'data': 4, 'fsdp': 1, 'sequence': 1, 'tensor': 1} "
                        "needs 4 devices but 1 are available; set parallel.data, fsdp, sequence and tensor to sizes "
                        "whose product is at most 1, e.g. --config.parallel.data=-1")
  resumed = run_command([*args, "--config.parallel.data=-1"], env=devices(1))
  assert resumed.returncode == 0, resumed.stderr
  assert "resumed from step 2" in resumed.stdout and "done: step 3" in resumed.stdout

  source = tmp_path / "source.txt"
  source.write_text("Save the file.\n")
  translated = run_command(["translate", f"--workdir={workdir}", f"--input={source}", "--checkpoint=latest"],
                           env=devices(1))
  assert translated.returncode == 0 and len(translated.stdout.splitlines()) == 1, translated.stderr
  assert translated.stderr == f"jformer translate: translating with step 3 of {workdir / 'checkpoints'}\n"
