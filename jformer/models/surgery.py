"""Attention surgery on a model config: which layer kinds replace the model's own attention (`model.layer_kinds`,
`model.layer_pattern` applied to a trained model), and whether attention transfer (`train.attention_transfer`,
`jformer.train.transfer`) can teach them."""

from __future__ import annotations

from jformer.models.config import TransformerConfig


def replaced_variants(model_config: TransformerConfig) -> list[str]:
  """The attention variants of the layer kinds that replace the model's own attention (sorted)."""
  own = (model_config.attention, model_config.attention_options)
  return sorted({kind.attention for kind in model_config.kind_configs.values()
                 if (kind.attention, kind.attention_options) != own})


def learned_replacements(model_config: TransformerConfig) -> list[str]:
  """Those of `replaced_variants` that learn parameters of their own (what attention transfer trains)."""
  return [name for name in replaced_variants(model_config)
          if any(kind.attention == name and kind.attention_variant.params
                 for kind in model_config.kind_configs.values())]


def transfer_problem(model_config: TransformerConfig, steps: int) -> str | None:
  """Why `train.attention_transfer=steps` cannot run on this model, or None."""
  if not steps:
    return None
  replaced = replaced_variants(model_config)
  if not replaced:
    return ("train.attention_transfer needs layers whose kind replaces the model's attention (model.layer_kinds and "
            f"model.layer_pattern with an attention other than '{model_config.attention}')")
  if not learned_replacements(model_config):
    return (f"train.attention_transfer trains the parameters the new attention owns, and {replaced} own none: use "
            "one that learns (e.g. hedgehog's feature maps), or train.attention_transfer=0 to fine-tune directly")
  if model_config.attention_variant.params or model_config.attention_variant.captures:
    return (f"the model's own attention '{model_config.attention}' reads parameters or captured tensors the "
            "converted layers no longer have, so it cannot be their teacher")
  if model_config.scan_layers:
    return "train.attention_transfer needs model.scan_layers=False (the teacher's outputs are sown per layer)"
  return None
