"""The layer contract in pyproject.toml (`[tool.importlinter]`) holds: each layer of jformer imports only the
layers below it. `lint-imports` (import-linter) checks every import in jformer/, those inside functions too."""

import pathlib
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
LINT_IMPORTS = pathlib.Path(sys.executable).parent / "lint-imports"


def lint_imports(root: pathlib.Path) -> subprocess.CompletedProcess:
  """`lint-imports` on the jformer/ under `root` (it puts its working directory first on the import path)."""
  return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=120)


def test_every_layer_imports_only_the_layers_below_it():
  result = lint_imports(REPO)
  assert result.returncode == 0, result.stdout + result.stderr


def test_the_contract_catches_a_back_edge(tmp_path):
  """A copy of the sources where ops imports models: the contract must break (the check is not vacuous)."""
  shutil.copytree(REPO / "jformer", tmp_path / "jformer", ignore=shutil.ignore_patterns("corpora", "__pycache__"))
  shutil.copy(REPO / "pyproject.toml", tmp_path)
  with open(tmp_path / "jformer" / "ops" / "masks.py", "a", encoding="utf-8") as f:
    f.write("\nfrom jformer import models  # a back-edge\n")
  result = lint_imports(tmp_path)
  assert result.returncode != 0, result.stdout
  assert "jformer.ops is not allowed to import jformer.models" in result.stdout, result.stdout
