"""Attention maps: the sown weights are distributions over the visible keys; the CLI writes one PNG per layer
and kind for a trained run."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from helpers import tiny_overrides
from jformer import config as config_lib
from jformer import main, tasks, visualize
from jformer.train.loop import train_and_evaluate

DEMO = pathlib.Path(__file__).resolve().parents[1] / "configs" / "small.py"


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
@pytest.mark.parametrize("option, kv_heads, variant", [("relative", 2, "dot_product"), ("alibi", 1, "chunked")])
def test_sown_weights_sum_to_one_over_visible_keys(option, kv_heads, variant):
  """Whatever variant computes the output, the recorded weights are softmax over exactly the visible keys."""
  config = config_lib.load(DEMO, {"model.vocab_size": 50, "model.d_model": 32, "model.num_heads": 4,
                                  "model.num_kv_heads": kv_heads, "model.positional": option, "model.d_ff": 64,
                                  "model.num_encoder_layers": 1, "model.num_decoder_layers": 1,
                                  "model.attention": variant})
  model = tasks.build_model(config)
  inputs = jnp.array([[5, 6, 7, 8, 9, 10, 0]])
  targets = jnp.array([[11, 12, 13, 14, 15]])
  input_segments, target_segments = jnp.array([[1, 1, 1, 2, 2, 2, 0]]), jnp.array([[1, 1, 2, 2, 2]])
  packing = dict(inputs_segmentation=input_segments, targets_segmentation=target_segments,
                 inputs_positions=jnp.array([[0, 1, 2, 0, 1, 2, 0]]), targets_positions=jnp.array([[0, 1, 0, 1, 2]]))
  # Eagerly: these shapes are the ones of `sown_maps` below (JAX compiles each op once per shape).
  variables = model.init(jax.random.PRNGKey(0), inputs, targets)
  assert "intermediates" not in variables  # init records nothing ...
  logits, state = model.apply(variables, inputs, targets, mutable=["intermediates"], **packing)
  np.testing.assert_allclose(logits, model.apply(variables, inputs, targets, **packing), atol=1e-6)
  sown = state["intermediates"]
  encoder_self = sown["encoder"]["layer_0"]["self_attention"]["attention_weights"][0][0]
  decoder_self = sown["decoder"]["layer_0"]["self_attention"]["attention_weights"][0][0]
  cross = sown["decoder"]["layer_0"]["cross_attention"]["attention_weights"][0][0]
  assert encoder_self.shape == (4, 7, 7) and decoder_self.shape == (4, 5, 5) and cross.shape == (4, 5, 7)
  same = lambda q, k: np.asarray(q)[0][:, None] == np.asarray(k)[0][None, :]
  visible = {"encoder": same(input_segments, input_segments) & (np.asarray(input_segments)[0] != 0)[None, :],
             "decoder": same(target_segments, target_segments) & np.tri(5, dtype=bool),
             "cross": same(target_segments, input_segments) & (np.asarray(input_segments)[0] != 0)[None, :]}
  real_source = np.asarray(input_segments)[0] != 0  # a padding query sees no key (its row is not a map).
  for weights, mask in ((np.asarray(encoder_self)[:, real_source], visible["encoder"][real_source]),
                        (np.asarray(decoder_self), visible["decoder"]), (np.asarray(cross), visible["cross"])):
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(weights[:, ~mask] == 0.0) and np.all(weights[:, mask] > 0.0)


@pytest.mark.integration
def test_visualize_attention_on_a_trained_run(tiny_corpus, tmp_path, capsys):
  config = config_lib.load(DEMO, tiny_overrides(tiny_corpus, **{
      "model.num_encoder_layers": 1, "model.num_decoder_layers": 2, "train.steps": 2, "train.bleu_examples": 1,
      "decode.batch_size": 1}))
  train_and_evaluate(config, str(tmp_path))
  capsys.readouterr()
  main.main(["visualize-attention", f"--workdir={tmp_path}", "--text", "Save the file before closing."])
  printed = capsys.readouterr().out
  assert "wrote 5 attention maps" in printed and "source pieces: ▁" in printed
  out = tmp_path / "attention"  # the default folder.
  expected = {"encoder_self_layer0.png"} | {f"{kind}_layer{i}.png" for kind in ("decoder_self", "cross")
                                            for i in (0, 1)}
  assert {p.name for p in out.glob("*.png")} == expected
  for name in expected:
    with Image.open(out / name) as image:
      assert image.format == "PNG" and min(image.size) > 100
      image.verify()
  arrays = np.load(out / "attention.npz")
  source, target = list(arrays["source"]), list(arrays["target"])
  assert source[-1] == "</s>" and len(target) >= 1
  assert arrays["encoder_self_layer0"].shape == (2, len(source), len(source))
  assert arrays["decoder_self_layer0"].shape == (2, len(target), len(target))
  assert arrays["cross_layer1"].shape == (2, len(target), len(source))
  np.testing.assert_allclose(arrays["cross_layer0"].sum(-1), 1.0, atol=1e-5)


def test_visualize_attention_errors(tmp_path):
  with pytest.raises(SystemExit, match="config.json does not exist"):
    main.main(["visualize-attention", f"--workdir={tmp_path}", "--text", "Open"])
  language_model = tasks.build_model(config_lib.load(DEMO, {"model.architecture": "lm"}))
  with pytest.raises(ValueError, match="needs an encoder-decoder run"):
    visualize.attention_maps(None, language_model, None, None, "Open")


def sown_maps(variant, **overrides):
  """Encoder self-attention weights `[H, 7, 7]` sown by a one-layer model running `variant`, and its config."""
  config = config_lib.load(DEMO, {"model.vocab_size": 50, "model.d_model": 32, "model.num_heads": 4, "model.d_ff": 64,
                                  "model.num_encoder_layers": 1, "model.num_decoder_layers": 1,
                                  "model.attention": variant, "model.positional": "none", **overrides})
  model = tasks.build_model(config)
  inputs, targets = jnp.array([[5, 6, 7, 8, 9, 10, 11]]), jnp.array([[11, 12, 13, 14, 15]])
  variables = model.init(jax.random.PRNGKey(0), inputs, targets)
  _, state = model.apply(variables, inputs, targets, mutable=["intermediates"])
  return np.asarray(state["intermediates"]["encoder"]["layer_0"]["self_attention"]["attention_weights"][0][0])


@pytest.mark.integration  # moved out of the fast tier (README command 2 within 5 minutes on 2 cores).
def test_local_maps_show_the_window_and_linear_maps_its_kernel_weights():
  """The maps are what each variant applies: `local` gives zero weight outside |i - j| < window; `linear`
  gives phi(q).phi(k) / sum, which is never softmax's (its ratios are not exponentials of score gaps)."""
  windowed = sown_maps("local", **{"model.attention_options.window_size": 2})
  outside = np.abs(np.arange(7)[:, None] - np.arange(7)[None, :]) >= 2
  assert np.all(windowed[:, outside] == 0.0) and np.all(windowed[:, ~outside] > 0.0)
  np.testing.assert_allclose(windowed.sum(-1), 1.0, atol=1e-5)
  linear, softmax = sown_maps("linear"), sown_maps("dot_product")
  np.testing.assert_allclose(linear.sum(-1), 1.0, atol=1e-5)
  assert np.all(linear > 0.0) and np.abs(linear - softmax).max() > 1e-2


def test_a_variant_without_weights_has_no_maps(scratch_registries):
  from jformer.attention import registry

  dense = registry.get("dot_product")
  registry.register("opaque", supports=dense.supports - {"gqa"}, weights=None, reference=dense.reference)(
      lambda query, key, value, **masking: dense.fn(query, key, value, **masking))
  model = tasks.build_model(config_lib.load(DEMO, {"model.attention": "opaque"}))
  with pytest.raises(ValueError, match="attention variant 'opaque' has no weights function"):
    visualize.attention_maps(None, model, None, None, "Open")
