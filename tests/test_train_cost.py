"""The cost of training while it trains (jformer/train/cost.py): FLOPs per token against the paper's count for known
configs, MFU on the progress line from them and the peak, the peak from the data sheet table or the CPU probe
(measured once per process), peak memory (the process's RSS on a CPU), `train.profile_steps` refused when malformed;
a short run logs the MFU column and writes the profile of its chosen steps (integration)."""

from __future__ import annotations

import json
import resource
import types

import jax
import pytest

from helpers import load_tiny, tiny
from jformer.models import TransformerConfig
from jformer.train import cost
from jformer.train.loop import train_and_evaluate
from jformer.train.progress import Progress


def paper_forward_flops(*, layers_enc, layers_dec, n, d, f, vocab, kv_fraction=1.0, cross=True):
  """The forward count of one row written out from jformer/models/flops.py's docstring (paper Sec. 3 shapes):
  self-attention 4nd^2 (Q, O) + 4nd^2 k (K, V) + 4n^2 d; feed-forward 4ndf; cross-attention 4nd^2 + 4nd^2 k +
  4n^2 d (source = target length n); output 2ndV."""
  self_attention = 4 * n * d * d + 4 * n * d * d * kv_fraction + 4 * n * n * d + 4 * n * d * f
  cross_attention = 4 * n * d * d + 4 * n * d * d * kv_fraction + 4 * n * n * d if cross else 0
  return layers_enc * self_attention + layers_dec * (self_attention + cross_attention) + 2 * n * d * vocab


def test_flops_per_token_is_three_forward_passes_over_the_rows_tokens():
  translation = tiny().config  # d 32, d_ff 64, vocabulary 50, 2 + 2 layers, 4 heads.
  want = 3 * paper_forward_flops(layers_enc=2, layers_dec=2, n=16, d=32, f=64, vocab=50) / 32  # source + target.
  assert want == 146_112
  assert cost.flops_per_token(translation, 16) == want
  lm = tiny(**{"model.architecture": "lm", "model.num_kv_heads": 2}).config
  want = 3 * paper_forward_flops(layers_enc=0, layers_dec=2, n=16, d=32, f=64, vocab=50, kv_fraction=0.5,
                                 cross=False) / 16
  assert want == 107_904
  assert cost.flops_per_token(lm, 16) == want


def test_the_progress_line_carries_mfu_from_the_tokens_flops_and_peak(tmp_path, capsys):
  step_cost = cost.StepCost(flops_per_token=2e6, peak_flops=1e9, peak_source="test peak")
  progress = Progress(tmp_path, 10, 0, step_cost)
  progress.step(999.0, timed=False)  # the compiling step: not in tokens/s, nor in MFU.
  report = progress.report(1)
  assert "mfu" not in report and "| MFU -- |" in capsys.readouterr().out
  for _ in range(3):
    progress.step(100.0)
  rss_mib = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  before = rss_mib()
  report = progress.report(4)
  assert report["mfu"] == pytest.approx(report["tokens_per_second"] * 2e6 / 1e9, rel=1e-12)
  assert before <= report["peak_rss_mib"] <= rss_mib()  # the CPU backend reports no device memory.
  line = capsys.readouterr().out
  assert f"| MFU {100 * report['mfu']:.1f}% | RSS {report['peak_rss_mib']:,.0f} MiB |" in line
  progress.close()


def test_the_peak_of_a_known_chip_is_its_data_sheet_figure_and_a_cpus_is_measured_once():
  h200 = types.SimpleNamespace(device_kind="NVIDIA H200", platform="gpu")
  assert cost.device_peak(h200, "float32") == (989e12, "H200 bfloat16 data sheet peak")
  v5e = types.SimpleNamespace(device_kind="TPU v5 lite", platform="tpu")
  assert cost.device_peak(v5e, "bfloat16")[0] == 197e12
  peak, source = cost.device_peak(jax.devices()[0], "float32")
  assert 1e8 < peak < 1e14 and source == "512^3 float32 matmul measured at start-up"
  calls = cost.measured_peak.cache_info().misses
  assert cost.device_peak(jax.devices()[0], "float32")[0] == peak
  assert cost.measured_peak.cache_info().misses == calls  # once per process.
  eight = cost.StepCost.of(tiny().config, 16)  # 8 simulated CPU devices share the host's cores: one peak.
  assert eight.peak_flops == peak and eight.peak_source.startswith("1 x 512^3 float32")


def test_mfu_never_exceeds_100_percent_of_a_measured_peak_and_a_data_sheet_peak_stays(capsys):
  """Injected rates, no clock: a measured peak (the start-up probe) below the rate the steps reach is raised to it,
  said once; a data sheet peak is kept, so a FLOP count above it still shows."""
  probe = cost.StepCost(flops_per_token=1e6, peak_flops=1e9, peak_source=f"1 x 512^3 float32 matmul {cost.MEASURED}",
                        measured=True)
  assert probe.mfu(800.0) == pytest.approx(0.8) and probe.peak_flops == 1e9 and capsys.readouterr().out == ""
  assert probe.mfu(1200.0) == 1.0 and probe.peak_flops == pytest.approx(1.2e9)  # 1.2 GFLOP/s reached: the peak.
  assert capsys.readouterr().out == ("cost: the steps ran at 1.2 GFLOP/s, above the start-up probe's 1.0: MFU divides "
                                     "by the best rate the steps reach from now on\n")
  assert probe.mfu(1500.0) == 1.0 and probe.mfu(600.0) == pytest.approx(0.4)  # 0.6 of the best, 1.5 GFLOP/s.
  assert probe.peak_source.endswith(cost.RAISED) and capsys.readouterr().out == ""  # said once.
  sheet = cost.StepCost(flops_per_token=1e6, peak_flops=1e9, peak_source="1 x H100 bfloat16 data sheet peak")
  assert sheet.mfu(1200.0) == pytest.approx(1.2) and sheet.peak_flops == 1e9
  assert cost.StepCost.of(tiny().config, 16).measured  # this CPU's peak is the probe's.


@pytest.mark.parametrize("steps", [(3, 2), (0, 2), (1, 2, 3)])
def test_malformed_profile_steps_are_refused_in_one_line(steps, tiny_corpus):
  with pytest.raises(ValueError, match=r"train.profile_steps=.* is not two steps \(a, b\) with 1 <= a <= b; give "
                                       r"e.g. train.profile_steps=\(10, 12\), or \(\) for no profile"):
    load_tiny(tiny_corpus, **{"train.profile_steps": steps})


@pytest.mark.integration  # a short run.
def test_a_run_logs_mfu_and_writes_the_profile_of_its_chosen_steps(tiny_corpus, tmp_path, capsys):
  config = load_tiny(tiny_corpus, **{"train.profile_steps": (3, 4), "train.bleu_examples": 2})
  train_and_evaluate(config, str(tmp_path))
  out = capsys.readouterr().out
  lines = [line for line in out.splitlines() if line.startswith("step ")]
  assert len(lines) == 3 and all(" | MFU " in line and " | RSS " in line for line in lines), out
  assert "profile of steps 3-4 written to" in out
  traces = list((tmp_path / "tensorboard" / "plugins" / "profile").glob("*/*.xplane.pb"))
  assert len(traces) == 1 and traces[0].stat().st_size > 0
  results = json.loads((tmp_path / "results.json").read_text())
  peak = cost.measured_peak("float32")  # what the run measured: once per process.
  want = results["tokens_per_second"] * cost.flops_per_token(TransformerConfig.from_config(config.model), 32) / peak
  if "above the start-up probe's" in out:  # the steps outran the probe: MFU is of their best rate.
    assert 0 < results["mfu"] <= 1.0 and results["mfu"] < want
  else:
    assert results["mfu"] == pytest.approx(want, rel=1e-9)
  assert results["peak_rss_mib"] > 0
