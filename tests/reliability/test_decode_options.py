"""`jformer generate` and `jformer translate` refuse a decoding option out of its range, or given to a method that
does not read it (silently ignored, it would hide a mistake): one line naming the option, its allowed values or the
method that reads it, exit status 1, nothing decoded.

generate takes the options as flags (`--beam_size=0`), translate as config overrides (`--config.decode.beam_size=0`).
Both runs are built without training (`helpers.untrained_run`, decode.method greedy) and run in this process.
"""

import pytest
from helpers import assert_one_line_error, run_cli, untrained_run


@pytest.fixture(scope="module")
def runs(tiny_corpus, tmp_path_factory):
  """{"lm": workdir, "transformer": workdir, "input": a file of two lines}: a language model's run and a translation
  model's run, both with decode.method='greedy' and model.max_length=64."""
  folder = tmp_path_factory.mktemp("decode_options")
  found = {architecture: folder / architecture for architecture in ("lm", "transformer")}
  for architecture, workdir in found.items():
    untrained_run(workdir, tiny_corpus, architecture)
  found["input"] = folder / "input.txt"
  found["input"].write_text("Save the file\nOpen the file\n")
  return found


@pytest.mark.parametrize("flags, error", [
    # Out of range.
    (["--method=beam", "--beam_size=0"], "--beam_size=0 must be a whole number >= 1"),
    (["--method=beam", "--alpha=nan"], "--alpha=nan must be a finite number >= 0"),
    (["--method=sample", "--temperature=-1"], "--temperature=-1.0 must be a finite number > 0"),
    (["--method=sample", "--temperature=nan"], "--temperature=nan must be a finite number > 0"),
    (["--method=sample", "--top_p=2"], "--top_p=2.0 must be a number in (0, 1] (1 = off)"),
    (["--method=sample", "--top_k=-1"], "--top_k=-1 must be a whole number >= 0 (0 = off)"),
    (["--batch_size=0"], "--batch_size=0 must be a whole number >= 1"),
    (["--max_new_tokens=0"], "--max_new_tokens=0 must be a whole number >= 1"),
    (["--max_new_tokens=64"], "--max_new_tokens=64 must be from 1 to model.max_length - 1 = 63 (the prompt and its "
                              "continuation share model.max_length)"),
    (["--method=nucleus"], "unknown decoding method 'nucleus'; give one of beam, greedy, sample"),
    # Not read by the method: the one given, or the run's (greedy).
    (["--method=beam", "--top_k=5"], "--top_k is read by method 'sample' only, not by 'beam' (drop it, or use "
                                     "--method=sample)"),
    (["--method=sample", "--beam_size=2"], "--beam_size is read by method 'beam' only, not by 'sample' (drop it, or "
                                           "use --method=beam)"),
    (["--temperature=0.7"], "--temperature is read by method 'sample' only, not by 'greedy'"),
    # Both at once, in the one line.
    (["--temperature=-1"], "--temperature=-1.0 must be a finite number > 0; --temperature is read by method 'sample' "
                           "only, not by 'greedy'"),
])
def test_generate_refuses_an_option_out_of_range_or_not_read_by_the_method(runs, capsys, flags, error):
  status, err = run_cli(["generate", f"--workdir={runs['lm']}", f"--input={runs['input']}", *flags], capsys)
  assert_one_line_error(status, err, f"jformer generate: error: {error}")


@pytest.mark.parametrize("overrides, error", [
    # Out of range (the config's declared least values, then each method's ranges).
    (["--config.decode.beam_size=0"], "invalid config: decode.beam_size=0 must be at least 1"),
    (["--config.decode.max_extra_length=0"], "invalid config: decode.max_extra_length=0 must be at least 1"),
    (["--config.decode.batch_size=0"], "invalid config: decode.batch_size=0 must be at least 1"),
    (["--config.decode.method=beam", "--config.decode.alpha=nan"],  # not a Python literal: no number.
     "config key 'decode.alpha' is a float; got 'nan' (str): give e.g. decode.alpha=0.6"),
    (["--config.decode.method=sample", "--config.decode.temperature=-1"],
     "invalid config: decode.temperature=-1.0 must be a finite number > 0"),
    (["--config.decode.method=sample", "--config.decode.temperature=0"],
     "invalid config: decode.temperature=0.0 must be a finite number > 0"),
    (["--config.decode.method=sample", "--config.decode.top_p=2"],
     "invalid config: decode.top_p=2.0 must be a number in (0, 1] (1 = off)"),
    (["--config.decode.method=nucleus"],
     "invalid config: decode.method='nucleus' is not one of 'beam', 'greedy', 'sample'"),
    # Not read by the method: the one given, or the run's (greedy).
    (["--config.decode.method=beam", "--config.decode.top_k=5"],
     "--config.decode.top_k is read by method 'sample' only, not by 'beam' (drop it, or use "
     "--config.decode.method=sample)"),
    (["--config.decode.temperature=0.7"],
     "--config.decode.temperature is read by method 'sample' only, not by 'greedy'"),
    (["--config.decode.method=sample", "--config.decode.alpha=0.8"],
     "--config.decode.alpha is read by method 'beam' only, not by 'sample'"),
])
def test_translate_refuses_an_option_out_of_range_or_not_read_by_the_method(runs, capsys, overrides, error):
  status, err = run_cli(["translate", f"--workdir={runs['transformer']}", f"--input={runs['input']}", *overrides],
                        capsys)
  assert_one_line_error(status, err, f"jformer translate: error: {error}")


@pytest.mark.integration  # compiles a sampler and a beam search.
def test_options_the_method_reads_are_taken(runs, capsys, tmp_path):
  """The refusals above are about the options, not the runs: the same runs decode with options their method
  reads, one output line per input line."""
  continued, translated = tmp_path / "continued.txt", tmp_path / "translated.txt"
  status, err = run_cli(["generate", f"--workdir={runs['lm']}", f"--input={runs['input']}", f"--output={continued}",
                         "--method=sample", "--temperature=0.7", "--top_k=5", "--top_p=0.9", "--max_new_tokens=3"],
                        capsys)
  assert status == 0 and len(continued.read_text().splitlines()) == 2, err
  status, err = run_cli(["translate", f"--workdir={runs['transformer']}", f"--input={runs['input']}",
                         f"--output={translated}", "--config.decode.method=beam", "--config.decode.beam_size=2",
                         "--config.decode.alpha=0.8", "--config.decode.max_extra_length=3"], capsys)
  assert status == 0 and len(translated.read_text().splitlines()) == 2, err
