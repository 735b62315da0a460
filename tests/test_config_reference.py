"""docs/config.md is generated from the config schema and kept in step with it."""

from jformer.config import reference


def test_the_config_reference_is_current(tmp_path):
  assert reference.main(["--check"]) == 0, "docs/config.md is stale: run `python -m jformer.config.reference`"
  assert reference.main(["--check", f"--out={tmp_path / 'missing.md'}"]) == 1


def test_every_declared_field_has_a_row_with_its_default_and_identity():
  from jformer import config

  page = reference.markdown()
  for key, field in config.declared():
    row = next(line for line in page.splitlines() if line.startswith(f"| `{key}` |"))
    assert (" | yes | " in row) == field.spec.identity, key
  assert "| `model.attention` | `'auto'` | a registered attention variant (additive, auto," in page
  assert "| `data.pack` | `'documents'` | 'documents', 'stream' | yes |" in page
