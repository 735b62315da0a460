"""What the backend or the model's architecture cannot run is refused when the config is loaded, before anything is
prepared or written (`TransformerConfig.kernel_refusal`: a variant's declared `platforms` and `limits` against the
model's attention calls; `TransformerConfig.mod_problem`: a flex variant's functions on one small traced call),
and a start that fails before its first step records no identity that would refuse the corrected command in the
same workdir."""

import resource

import pytest
from helpers import REPO, SMALL, assert_one_line_error, run_cli, run_command, tiny_overrides

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


# A flex variant 'mine' made of one function `mod` (its `def` at line 8, its body at line 9).
FLEX_PLUGIN = """\"\"\"A researcher's flex variant.\"\"\"
import jax.numpy as jnp
import numpy as np
from jformer.attention import flex
from jformer.registry import Param, constant


def mod({arguments}):
  {body}


flex.register("mine", {kind}=mod, params={{"slope": Param(("heads",), constant(0.5))}})
"""
SCORE, MASK = "score, b, h, q_idx, kv_idx, *, params", "b, h, q_idx, kv_idx"
LOG_DISTANCE = "return score - params['slope'][h] * jnp.log(1 + (q_idx - kv_idx))"  # NaN where the key is after i


@pytest.mark.parametrize("kind, arguments, body, line, what, fix", [
    # Issue 49: a mask written as a score_mod (or an int) trained silently, attention ignoring q . k.
    ("score_mod", SCORE, "return kv_idx <= q_idx", 8, "it returns bool, not the new logit (float): the logits become "
     "its values, so attention ignores q . k", "or register a mask (True: the query sees the key) as mask_mod="),
    ("score_mod", SCORE, "return q_idx - kv_idx", 8, "it returns int32, not the new logit (float)",
     "return a float formula of `score`"),
    ("mask_mod", MASK, "return (kv_idx <= q_idx).astype(jnp.int32)", 8, "it returns int32, not bool",
     "return a comparison (e.g. kv_idx <= q_idx)"),
    # Mistakes that raised while the model was traced: a bare JAX error, or 100 lines into the engine.
    ("score_mod", SCORE, "return score * undefined_scale", 9,
     "raised NameError: name 'undefined_scale' is not defined", "fix it there"),
    ("score_mod", SCORE, "return score.sum(-1)", 8, "it returns shape (2, 4, 3) where its arguments (score, b, h, "
     "q_idx, kv_idx) broadcast to (2, 4, 3, 5)", "keep it elementwise"),
    ("score_mod", SCORE, "return score - [0.1, 0.2, 0.3, 0.4][h]", 9, "raised TypeError: Only integer scalar arrays "
     "can be converted to a scalar index", "index jnp arrays with them (jnp.asarray([...])[h], or declare params=)"),
    ("score_mod", SCORE, "return score - np.array([0.1, 0.2, 0.3, 0.4])[h]", 9,
     "raised TracerArrayConversionError: ", "not Python lists or numpy arrays"),
    # NaN on visible pairs: the encoder's self-attention is not causal, so a key after the query is visible.
    ("score_mod", SCORE, LOG_DISTANCE, 8, "it is NaN or inf at 72 of 120 visible pairs of the model's encoder "
     "self-attention (not causal), e.g. b=0, h=0, q_idx=0, kv_idx=1",
     "make the formula finite wherever the key is visible"),
])
def test_a_flex_mod_mistake_is_named_at_load_with_its_file_and_line(tmp_path, capsys, scratch_registries, kind,
                                                                    arguments, body, line, what, fix):
  """Issue 49: checked on one small traced call before anything is prepared: one line naming the variant, the
  function's file and line (where it raised, else its `def`), what is wrong and the fix; no workdir."""
  plugin = tmp_path / "mine.py"
  plugin.write_text(FLEX_PLUGIN.format(kind=kind, arguments=arguments, body=body))
  workdir = tmp_path / "run"
  status, err = run_cli(["train", f"--config={SMALL}", f"--workdir={workdir}", f"--config.imports={plugin}",
                         "--config.model.attention=mine"], capsys)
  assert_one_line_error(status, err, f"jformer train: error: flex variant 'mine' ({plugin}:{line}, {kind}): {what}",
                        fix)
  assert not workdir.exists()


def test_a_flex_mod_finite_where_causal_masking_hides_the_nan_is_accepted_in_a_language_model(tmp_path,
                                                                                          scratch_registries):
  """The log-distance score_mod is NaN only past the query: a language model's causal attention never sees those
  pairs (and the engine evaluates the mods there on a visible pair's values), so it is accepted."""
  plugin = tmp_path / "mine.py"
  plugin.write_text(FLEX_PLUGIN.format(kind="score_mod", arguments=SCORE, body=LOG_DISTANCE))
  config = config_lib.load(SMALL, {"imports": str(plugin), "model.attention": "mine", "model.architecture": "lm",
                                   "data.dataset": "text"})
  assert config.model.attention == "mine"
