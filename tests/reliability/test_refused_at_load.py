"""What the backend or the model's architecture cannot run is refused when the config is loaded, before anything is
prepared or written (`TransformerConfig.kernel_refusal`: a variant's declared `platforms` and `limits` against the
model's attention calls), and a start that fails before its first step records no identity that would refuse the
corrected command in the same workdir."""

import resource

import pytest
from helpers import REPO, SMALL, assert_one_line_error, run_command, tiny_overrides

from jformer import config as config_lib

DEMO = REPO / "configs" / "demo.py"


@pytest.mark.parametrize("overrides, backend, refusal", [
    ({"model.attention": "cudnn"}, "cpu", "'cudnn' (model.attention) runs only on gpu (the platforms it declares), "
     "and this run's JAX backend is cpu; set model.attention='auto'"),
    ({"model.attention": "splash"}, "gpu", "'splash' (model.attention) runs only on tpu"),
    ({"model.attention": "pallas_gpu"}, "tpu", "'pallas_gpu' (model.attention) runs only on gpu"),
    # On its own backend: what its `limits` refuse among the model's calls.
    ({"model.attention": "pallas_gpu"}, "gpu", "'pallas_gpu' (model.attention) cannot run the model's "
     "cross-attention (decoder to encoder): it takes one segment-id array for queries and keys"),
    ({"model.attention": "cudnn", "model.dtype": "float32"}, "gpu", "'cudnn' (model.attention) cannot run the "
     "model's encoder self-attention: cuDNN flash attention takes bfloat16 or float16 inputs, got float32"),
    ({"model.attention": "cudnn", "model.dtype": "float32"}, None, "cuDNN flash attention takes bfloat16"),  # anywhere.
    ({"model.layer_kinds": {"a": {"attention": "cudnn"}, "b": {"attention": "dot_product"}},
      "model.layer_pattern": ("a", "b"), "model.architecture": "lm"}, "cpu",
     "'cudnn' (model.layer_kinds.a.attention) runs only on gpu"),
])
def test_a_kernel_is_refused_for_the_backend_and_the_calls_it_cannot_run(overrides, backend, refusal):
  with pytest.raises(ValueError, match="invalid config: attention variant ") as error:
    config_lib.load(SMALL, overrides, backend=backend)
  assert refusal in str(error.value)


@pytest.mark.parametrize("overrides, backend", [
    ({"model.attention": "auto"}, backend) for backend in ("cpu", "gpu", "tpu", None)] + [
    ({"model.attention": "pallas_gpu", "model.architecture": "lm"}, "gpu"),  # self-attention only: it can.
    ({"model.attention": "cudnn", "model.dtype": "auto"}, "gpu"),  # auto: bfloat16 on a GPU.
    ({"model.attention": "cudnn", "model.dtype": "auto"}, None),  # bfloat16 is one of auto's dtypes.
    ({"model.attention": "splash"}, "tpu"),
    ({"model.attention": "local", "model.attention_options.window_size": 4}, "cpu"),  # runs through auto.
])
def test_auto_and_kernels_on_their_backend_are_accepted(overrides, backend):
  config_lib.load(SMALL, overrides, backend=backend)


def refused_fast(args, *fragments, env=None):
  """Runs the command; asserts the one-line refusal (exit 1) came within 10 s of the command's CPU time (about 2 s
  on a quiet 2-core machine, where preparing the bundled corpus takes a minute; CPU time, not wall clock, so that
  other tests running beside this one cannot fail it)."""
  cpu = lambda: (lambda usage: usage.ru_utime + usage.ru_stime)(resource.getrusage(resource.RUSAGE_CHILDREN))
  start = cpu()
  result = run_command(args, env=env)
  seconds = cpu() - start
  assert_one_line_error(result.returncode, result.stderr, *fragments)
  assert seconds < 10, f"refused after {seconds:.1f} s of CPU time"
  return result


@pytest.mark.integration  # three commands in subprocesses, a few seconds each.
@pytest.mark.parametrize("kernel, platform", [("cudnn", "gpu"), ("pallas_gpu", "gpu"), ("splash", "tpu")])
def test_a_kernel_for_another_backend_is_refused_at_load_writing_nothing(tmp_path, kernel, platform):
  """The demo on the bundled corpus (whose preparation takes a minute): refused in seconds, no workdir."""
  workdir = tmp_path / "run"
  refused_fast(["train", f"--config={DEMO}", f"--workdir={workdir}", f"--config.model.attention={kernel}"],
               f"jformer train: error: invalid config: attention variant '{kernel}' (model.attention) runs only on "
               f"{platform}", "set model.attention='auto'")
  assert not workdir.exists()


@pytest.mark.integration
def test_pallas_gpu_on_the_encoder_decoder_is_refused_on_a_gpu_for_its_cross_attention(tmp_path):
  """JAX asked for CUDA (validation decides the backend without starting it, so no GPU is needed to be refused)."""
  workdir = tmp_path / "run"
  refused_fast(["train", f"--config={DEMO}", f"--workdir={workdir}", "--config.model.attention=pallas_gpu"],
               "attention variant 'pallas_gpu' (model.attention) cannot run the model's cross-attention",
               env={"JAX_PLATFORMS": "cuda"})
  assert not workdir.exists()


@pytest.mark.integration
def test_a_sweep_point_with_a_kernel_the_backend_cannot_run_fails_dry_run_validation(tmp_path):
  sweep = tmp_path / "kernels.py"
  sweep.write_text(f"BASE = {str(SMALL)!r}\n\ndef get_sweep():\n"
                   "  return [{'model.attention': 'auto'}, {'model.attention': 'cudnn'}]\n")
  root = tmp_path / "root"
  result = run_command(["launch", f"--sweep={sweep}", f"--root={root}", "--dry_run"])
  assert_one_line_error(result.returncode, result.stderr, "launch: error: sweep 'kernels': point 1 'attention=cudnn'",
                        "attention variant 'cudnn' (model.attention) runs only on gpu")
  assert not root.exists()


FAILING_VARIANT = """
from jformer.attention import register, softmax_weights


@register("fails_when_traced", supports={"causal", "segment_ids"}, weights=softmax_weights)
def fails_when_traced(query, key, value, **masking):
  raise ValueError("fails_when_traced cannot run this call")
"""


@pytest.mark.integration  # two tiny runs' starts: ~40 s on 2 busy cores.
def test_a_start_that_fails_before_its_first_step_leaves_nothing_that_refuses_the_fix(tiny_corpus, tmp_path):
  """A variant that fails only when the first step compiles (after the data and vocabulary are prepared): the
  corrected command (another model.attention, an identity key) trains in the same workdir."""
  plugin = tmp_path / "fails_when_traced.py"
  plugin.write_text(FAILING_VARIANT)
  workdir = tmp_path / "run"
  args = ["train", f"--config={SMALL}", f"--workdir={workdir}",
          *(f"--config.{k}={v}" for k, v in tiny_overrides(tiny_corpus, **{"train.steps": 2}).items())]
  failed = run_command([*args, f"--config.imports={plugin}", "--config.model.attention=fails_when_traced"])
  assert_one_line_error(failed.returncode, failed.stderr, "fails_when_traced cannot run this call")
  assert (workdir / "vocab").exists() and not (workdir / "config.json").exists()
  fixed = run_command([*args, "--config.model.attention=dot_product"])
  assert fixed.returncode == 0, fixed.stderr
  assert "done: step 2" in fixed.stdout
  assert config_lib.read_run(workdir).model.attention == "dot_product"
