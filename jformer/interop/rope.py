"""A Hugging Face config's rotary settings as jformer's `rotary` options (`jformer/positional/rotary.py`).

transformers reads them from `rope_parameters` (v5) or the older `rope_scaling` with a top-level `rope_theta`:
`rope_type` 'default', 'linear', 'dynamic', 'llama3' or 'yarn' and that type's keys become `positional_options`;
any other type (longrope, ...), a partial rotary, or YaRN's DeepSeek `mscale` keys are refused in one line. An
export writes the imported config.json back as it was, so its rotary settings go out as they came in (and a run
whose options changed is refused by the export).
"""

from __future__ import annotations

from jformer.interop.family import refuse

# rope_type -> jformer's `scaling` option.
SCALINGS = {"default": "none", "linear": "linear", "dynamic": "dynamic", "llama3": "llama3", "yarn": "yarn"}


def _rope_keys(hf: dict) -> dict:
  """The config's rotary keys in one dict: `rope_parameters` over `rope_scaling` over the top-level `rope_theta` and
  `partial_rotary_factor` (as transformers' `standardize_rope_params`)."""
  legacy = dict(hf.get("rope_scaling") or {})
  if "type" in legacy:
    legacy.setdefault("rope_type", legacy.pop("type"))
  top = {key: hf[key] for key in ("rope_theta", "partial_rotary_factor") if hf.get(key) is not None}
  return {"rope_type": "default", **top, **legacy, **(hf.get("rope_parameters") or {})}


def _needed(rope: dict, key: str, name: str) -> float:
  if rope.get(key) is None:
    refuse(name, f"rope_type '{rope['rope_type']}' without {key}: add it to rope_parameters (see the model's card)")
  return float(rope[key])


def rotary_options(hf: dict, name: str) -> dict:
  """`model.positional_options` of the `rotary` encoding that computes what transformers' `ROPE_INIT_FUNCTIONS`
  compute for this config (theta 10000 unless given)."""
  rope = _rope_keys(hf)
  kind = rope["rope_type"]
  if kind not in SCALINGS:
    refuse(name, f"rope_type '{kind}' is not a jformer rotary scaling (it has {sorted(SCALINGS)})")
  if rope.get("partial_rotary_factor", 1.0) != 1.0:
    refuse(name, f"partial_rotary_factor={rope['partial_rotary_factor']}: jformer rotates every feature of a head")
  options = {"base": float(rope.get("rope_theta") or 10000.0)}
  if kind == "default":
    return options
  max_positions = hf.get("max_position_embeddings", 2048)
  original = int(rope.get("original_max_position_embeddings") or max_positions)
  if rope.get("factor") is None and kind == "yarn":  # transformers: the ratio of the lengths (DeepSeek-V3's).
    factor = max_positions / original
  else:
    factor = _needed(rope, "factor", name)
  options.update(scaling=SCALINGS[kind], factor=factor)
  if kind == "dynamic":  # transformers scales from max_position_embeddings, whatever the original length says.
    options["original_max_length"] = int(max_positions)
  elif kind == "llama3":
    options.update(original_max_length=original, low_freq_factor=_needed(rope, "low_freq_factor", name),
                   high_freq_factor=_needed(rope, "high_freq_factor", name))
  elif kind == "yarn":
    if rope.get("mscale") or rope.get("mscale_all_dim"):
      refuse(name, "rope_parameters' mscale / mscale_all_dim (DeepSeek's YaRN attention scale) are not imported")
    options.update(original_max_length=original, beta_fast=float(rope.get("beta_fast") or 32.0),
                   beta_slow=float(rope.get("beta_slow") or 1.0), truncate=bool(rope.get("truncate", True)))
    if rope.get("attention_factor") is not None:
      options["attention_factor"] = float(rope["attention_factor"])
  return options
