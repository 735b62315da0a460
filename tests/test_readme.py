"""README.md is a guide that stays true: short, its test command is the one CI runs, and every file, config and
page it points to exists."""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def first_commands() -> list[str]:
  """The commands of README's first code block (comment lines dropped)."""
  block = README.split("```sh\n", 1)[1].split("```", 1)[0]
  return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_readme_is_a_guide_of_at_most_300_lines():
  assert len(README.splitlines()) <= 300


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second_verbatim():
  install_and_run, install_and_test = first_commands()
  assert install_and_run.startswith("python3 -m venv .venv") and "jformer train --config=configs/demo.py" in install_and_run
  assert install_and_test.startswith("python3 -m venv .venv") and "pytest" in install_and_test
  assert install_and_test in (REPO / ".ci" / "run").read_text().splitlines()


def test_every_path_readme_names_exists():
  linked = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)  # markdown links to files of the repository.
  named = re.findall(r"`((?:configs|jformer|tests|benchmarks|docs|launch)/[\w./-]+\.(?:py|md|json))`", README)
  for path in linked + named:
    if re.search(r"\b[A-Z]{3,}\b", path):  # a placeholder (configs/sweeps/NAME.py), not a file.
      continue
    assert (REPO / path).exists(), f"README.md names {path}, which does not exist"
  assert len(linked) >= 5 and len(named) >= 10  # the patterns still find README's links and paths.


def test_the_flex_example_is_the_plug_in_the_tests_train():
  """The five-line flex variant of "Extending jformer" is tests/plugins/learned_alibi.py's (tests/test_flex_plugins.py
  trains it and grades it)."""
  block = README.split("`tests/plugins/learned_alibi.py`, outside the package:\n\n```python\n", 1)[1].split("```", 1)[0]
  plugin = (REPO / "tests" / "plugins" / "learned_alibi.py").read_text().splitlines()
  assert [line for line in block.splitlines() if line] == [line for line in plugin if line][-4:]
