"""benchmarks/attention.py's flex rows (its timings are recorded by hand, docs/results/attention.md): `+alibi` names
give the hand-written path ALiBi's bias, the flex variants it registers compute the same attention as the paths
they are timed beside, and its table divides each flex row by that path."""

import jax
import numpy as np
import pytest

from helpers import REPO, import_benchmark


@pytest.mark.slow  # a check of the script the lead runs by hand (docs/results/attention.md), not of jformer
def test_flex_rows_compute_what_the_hand_written_rows_do_and_are_divided_by_them(scratch_registries):
  bench = import_benchmark("attention")
  args = bench.parse_args(["--lengths=16", "--heads=2", "--variants=chunked+alibi,flex_alibi,local,flex_window",
                           '--options={"local": {"window_size": 4}, "flex_window": {"window_size": 4}}'])
  assert args.options["chunked+alibi"] == {} and args.options["flex_window"] == {"window_size": 4}
  q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (1, 16, 2, 8)) for i in range(3))
  run = lambda name: bench.call_of(name, args)(q, k, v)
  np.testing.assert_allclose(run("flex_alibi"), run("chunked+alibi"), atol=1e-5)
  np.testing.assert_allclose(run("flex_window"), run("local"), atol=1e-5)
  row = lambda name, ms, mib: dict(variant=name, length=16, compile_s=1.0, temp_mib=mib, ms=ms, min_ms=ms,
                                   status="ok", **({"beside": bench.BESIDE[name]} if name in bench.BESIDE else {}))
  table = bench.table([row("chunked+alibi", 200.0, 40.0), row("flex_alibi", 220.0, 10.0)])
  assert "| flex_alibi | 16 | 220.0 | 220.0 | - | 10.0 | - | 1.10 | 0.250 | 1.0 |" in table


def test_imports_loads_a_plugin_to_time_beside_the_built_ins(scratch_registries, capsys, tmp_path):
  """`--imports=FILE` loads a plug-in as `--config.imports` does, so its variant can be named; a file that is not
  there is a usage error naming the flag."""
  bench = import_benchmark("attention")
  plugin = REPO / "tests" / "plugins" / "learned_alibi.py"
  args = bench.parse_args(["--lengths=16", "--heads=2", f"--imports={plugin}", "--variants=learned_alibi,chunked"])
  assert args.variants == ["learned_alibi", "chunked"]
  assert bench.learned_params("learned_alibi", args)["log_slope"].shape == (2,)  # one slope per head.
  with pytest.raises(SystemExit) as stop:
    bench.parse_args([f"--imports={tmp_path / 'none.py'}", "--variants=chunked"])
  assert stop.value.code == 2
  assert f"--imports: plugin file '{tmp_path / 'none.py'}' does not exist" in capsys.readouterr().err
