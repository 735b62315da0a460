"""The `jformer` command: help, summary figures against the paper, override errors."""

import re
import subprocess
import sys

import pytest

from jformer import main


def run(*args, cwd):
  return subprocess.run([sys.executable, "-m", "jformer.main", *args], cwd=cwd, capture_output=True, text=True,
                        timeout=300)


@pytest.mark.integration
def test_help_lists_commands(repo_root):
  result = run("--help", cwd=repo_root)
  assert result.returncode == 0
  assert "summary" in result.stdout and "attention" in result.stdout


@pytest.mark.parametrize("config_file, paper_millions", [("transformer_base.py", 65), ("transformer_big.py", 213)])
def test_summary_matches_paper_parameter_counts(config_file, paper_millions, repo_root, capsys):
  main.main(["summary", f"--config={repo_root / 'configs' / config_file}"])
  out = capsys.readouterr().out
  total = int(re.search(r"^total\s+([\d,]+)$", out, re.M).group(1).replace(",", ""))
  assert abs(total / 1e6 - paper_millions) / paper_millions < 0.05, total
  assert re.search(r"^\s+layer_5\s+[\d,]+$", out, re.M)  # per-layer rows.


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_summary_forward_and_override(repo_root, capsys):
  main.main(["summary", f"--config={repo_root / 'configs' / 'small.py'}", "--forward", "--config.model.d_model=128"])
  out = capsys.readouterr().out
  assert "logits (2, 32, 8000)" in out and "finite=True" in out


@pytest.mark.integration
def test_bad_override_exits_with_message(repo_root):
  result = run("summary", "--config=configs/small.py", "--config.model.num_head=2", cwd=repo_root)
  assert result.returncode != 0
  assert "did you mean 'model.num_heads'" in result.stderr
  result = run("summary", "--config=configs/small.py", "--bogus", cwd=repo_root)
  assert result.returncode != 0 and "unrecognised argument '--bogus'" in result.stderr


@pytest.mark.integration  # two forward passes of a small model, in processes of their own.
def test_verbosity_info_shows_which_kernel_runs_each_attention_call(repo_root):
  """The line saying which kernel `auto` picked (and why) is absl INFO: on the console with --verbosity=info, every
  sub-command taking the flag; off by default, so that the console keeps the progress lines."""
  args = ["summary", "--config=configs/small.py", "--forward", "--config.model.d_model=32",
          "--config.model.num_heads=2", "--config.model.d_ff=64"]
  shown, default = run(*args, "--verbosity=info", cwd=repo_root), run(*args, cwd=repo_root)
  assert shown.returncode == default.returncode == 0, shown.stderr + default.stderr
  # Once per distinct call (the forward pass's self-attention, padded and causal), naming the kernel.
  assert re.findall(r"attention 'auto' on cpu, float32, T=32 S=32 H=2 K=2 D=16, (.*)$", shown.stderr, re.M) == [
      "segment_ids: dot_product", "causal+segment_ids: dot_product"], shown.stderr
  assert "attention 'auto'" not in default.stderr and "finite=True" in default.stdout
  assert main.parse(["list", "--verbosity=debug"])[0].verbosity == "debug"


def test_attention_list(capsys):
  main.main(["attention", "list"])
  out = capsys.readouterr().out
  assert out.startswith("additive") and "chunked" in out and "dot_product" in out and "xla" in out
  assert ("supports: bias, causal, decode, gqa, mask, positions, segment_ids, window; options: hidden_size=64, "
          "query_chunk_size=64, key_chunk_size=64; learns: query_weight [heads, head_dim, hidden_size]") in out


def test_positional_list(capsys):
  main.main(["positional", "list"])
  out = capsys.readouterr().out
  assert out.startswith("alibi") and "acts: bias" in out and "acts: rotary; options: base=10000.0" in out
  assert "acts: bias; options: num_buckets=32, max_distance=128; learns: relative_embedding [num_buckets, heads]" in out


def test_list_shows_the_plugins_of_config_imports_and_refuses_other_overrides(repo_root, capsys, scratch_registries):
  """`jformer list attention --config.imports=FILE` loads the file and lists its variant; a config key list does not
  read is refused in one line, not ignored."""
  plugin = repo_root / "tests" / "plugins" / "learned_alibi.py"
  for argv in (["list", "attention"], ["attention", "list"]):
    main.main([*argv, f"--config.imports={plugin}"])
    out = capsys.readouterr().out
    assert re.search(r"^learned_alibi +ALiBi with a learned slope per head", out, re.M), out
    assert "learns: log_slope [heads]" in out
  with pytest.raises(SystemExit) as stop:
    main.main(["list", "attention", f"--config.imports={plugin}", "--config.model.attention=learned_alibi"])
  assert stop.value.code == ("jformer list: error: --config.model.attention is not read by jformer list, which only "
                             "lists plug-ins; drop it (give --config.imports=path/to/file.py to list your own "
                             "plug-ins too)")


def test_train_errors_are_one_line_unless_verbose(repo_root, tmp_path):
  typo = tmp_path / "typo.py"
  typo.write_text((repo_root / "configs" / "small.py").read_text().replace(
      "  config.train.steps = 600\n", "  config.train.steps = 600\n  config.train.stpes = 5\n"))
  args = ["train", f"--config={typo}", f"--workdir={tmp_path / 'run'}"]
  with pytest.raises(SystemExit) as stop:
    main.main(args)
  assert stop.value.code == (f"jformer train: error: config file '{typo}': unknown config key 'train.stpes'; "
                             "did you mean 'train.steps'?")
  with pytest.raises(KeyError, match="unknown config key 'train.stpes'"):
    main.main(args + ["--verbose"])


@pytest.mark.integration
def test_list_names_every_registered_plugin_of_every_kind_or_of_one(repo_root):
  """`jformer list`: a heading per kind and a line per registered name, as the registries hold them; `jformer list
  KIND` that kind alone (by its first word); an unknown kind is one line naming the kinds."""
  import json

  # The registries as a fresh process holds them (this one may hold plug-ins other tests loaded with their runs).
  fresh = subprocess.run([sys.executable, "-c", "import json; from jformer import main; print(json.dumps("
                          "{kind: plugins.available() for kind, plugins in main._kinds('list', {}).items()}))"],
                         cwd=repo_root, capture_output=True, text=True, timeout=300, check=True)
  kinds = json.loads(fresh.stdout)
  everything = run("list", cwd=repo_root)
  assert everything.returncode == 0, everything.stderr
  lines = everything.stdout.splitlines()
  headings = [line for line in lines if line.endswith("s:") and not line.startswith(" ")]
  assert headings == [f"{kind}s:" for kind in kinds]
  for kind, plugins in kinds.items():
    block = lines[lines.index(f"{kind}s:") + 1:]
    block = block[:next((i for i, line in enumerate(block) if line in headings), len(block))]
    assert [line.split()[0] for line in block if not line.startswith(" ")] == plugins, kind
  one = run("list", "task", cwd=repo_root)
  assert one.returncode == 0 and one.stdout.splitlines()[0] == "tasks:"
  assert [line.split()[0] for line in one.stdout.splitlines()[1:] if not line.startswith(" ")] == kinds["task"]
  unknown = run("list", "kernels", cwd=repo_root)
  assert unknown.returncode == 1 and unknown.stderr == (
      f"jformer list: error: unknown plug-in kind 'kernels'; kinds: {sorted(kinds)}\n")


@pytest.mark.integration
def test_every_command_runs_with_the_compilation_cache_its_environment_names(repo_root, tmp_path):
  """`jformer.main` turns JAX's persistent cache on before the command runs, in JFORMER_COMPILATION_CACHE's folder
  with the size limit (jformer/runtime.py); '' turns it off (as the tests' own processes run)."""
  import os

  probe = ("import sys, jax; from jformer import main; main.main(sys.argv[1:]); "
           "print(jax.config.jax_compilation_cache_dir, jax.config.jax_compilation_cache_max_size)")
  for setting, want in ((str(tmp_path / "xla"), f"{tmp_path / 'xla'} {4 * 2**30}"), ("", "None -1")):
    done = subprocess.run([sys.executable, "-c", probe, "list", "task"], cwd=repo_root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "JFORMER_COMPILATION_CACHE": setting})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines()[-1] == want
