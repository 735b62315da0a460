"""Gemma 2 (`Gemma2ForCausalLM`; Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size"): a
decoder-only model whose layers alternate local sliding-window attention and global attention (`layer_types`;
by default layer i is local when i is even), each sublayer between a pre-norm and a post-norm (`model.post_norm`),
RMSNorms whose weight is 1 + w (`rmsnorm_plus_one`, so a checkpoint's w is imported as it is), GeGLU with GELU's tanh
approximation, rotary positions (half-split pairs; base and scaling by `rope.rotary_options`) over `head_dim`
features, grouped-query attention with a head_dim of its own (`model.head_dim`; heads x head_dim need not be hidden_size), logits scaled by
query_pre_attn_scalar^-1/2 (`model.attention_scale_dim`), attention and final logits soft-capped
(c tanh(x / c)), token embeddings times sqrt(hidden_size), tied output embedding, no biases. A sliding layer's query
sees the last `sliding_window` keys, itself included (jformer's `local`)."""

from __future__ import annotations

from jformer.data.pretrained_vocab import VocabularyMap
from jformer.interop import llama, rope, tables
from jformer.interop.family import Family, refuse, register
from jformer.interop.tables import LINEAR, Row

# transformers' names of GELU's tanh approximation, which jformer's `geglu` computes (its "gelu" is the exact erf).
TANH_GELU = ("gelu_pytorch_tanh", "gelu_new")
# transformers' layer types -> jformer's layer kinds (`model.layer_kinds`).
KINDS = {"sliding_attention": "local", "full_attention": "global"}


def _layer_types(hf: dict) -> list[str]:
  """Each layer's type: `layer_types`, or transformers' default (sliding where the index is even)."""
  types = hf.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention"
                                    for i in range(hf["num_hidden_layers"])]
  unknown = sorted(set(types) - set(KINDS))
  if unknown:
    refuse("gemma2", f"layer_types holds {unknown}; jformer imports {sorted(KINDS)}")
  if len(types) != hf["num_hidden_layers"]:
    refuse("gemma2", f"layer_types names {len(types)} layers, num_hidden_layers={hf['num_hidden_layers']}")
  return types


def _pattern(types: list[str]) -> tuple[str, ...]:
  """The shortest `model.layer_pattern` whose repeats give the layers' kinds (layer i: pattern[i % len])."""
  kinds = [KINDS[t] for t in types]
  period = next(p for p in range(1, len(kinds) + 1) if all(kinds[i] == kinds[i % p] for i in range(len(kinds))))
  return tuple(kinds[:period])


def _attention(hf: dict) -> dict:
  """`model.layer_kinds` and `model.layer_pattern` of the local and global layers."""
  pattern = _pattern(_layer_types(hf))
  kinds = {"global": {"attention": "auto"}}
  window = hf.get("sliding_window", 4096)
  if "local" in pattern:
    if not window:
      refuse("gemma2", f"sliding_window={window} with sliding layers: give the window size")
    kinds["local"] = {"attention": "local", "attention_options": {"window_size": int(window)}}
  return {"attention": "auto", "layer_kinds": {kind: kinds[kind] for kind in dict.fromkeys(pattern)},
          "layer_pattern": pattern}


def _check(hf: dict) -> None:
  """Refuses what jformer's block cannot compute, naming the field."""
  activation = hf.get("hidden_activation") or "gelu_pytorch_tanh"
  if activation not in TANH_GELU:
    refuse("gemma2", f"hidden_activation='{activation}' (jformer's geglu is GELU's tanh approximation, "
           f"{' or '.join(TANH_GELU)})")
  if hf.get("attention_bias"):
    refuse("gemma2", "attention_bias=True (biases on q/k/v/o but not the MLP) has no jformer block")
  if hf.get("use_bidirectional_attention"):
    refuse("gemma2", "use_bidirectional_attention=True: jformer's language model is causal")


def model_fields(hf: dict) -> dict:
  """jformer's model fields; a field config.json leaves out takes transformers' Gemma2Config default (soft-caps 50
  and 30, window 4096, query_pre_attn_scalar 256), except the shapes, which it must give."""
  _check(hf)
  heads, kv_heads = hf["num_attention_heads"], hf["num_key_value_heads"]
  return {"architecture": "lm", "d_model": hf["hidden_size"], "num_heads": heads,
          "num_kv_heads": 0 if kv_heads == heads else kv_heads, "head_dim": hf["head_dim"],
          "d_ff": hf["intermediate_size"], "num_encoder_layers": 0, "num_decoder_layers": hf["num_hidden_layers"],
          "norm": "pre", "post_norm": True, "normalization": "rmsnorm_plus_one",
          "norm_epsilon": float(hf.get("rms_norm_eps", 1e-6)), "final_norm": True, "activation": "geglu",
          "positional": "rotary", "positional_options": rope.rotary_options(hf, "gemma2"), "use_bias": False,
          "qkv_bias": False, **_attention(hf), "attention_scale_dim": float(hf.get("query_pre_attn_scalar", 256)),
          "attention_logit_softcap": float(hf.get("attn_logit_softcapping", 50.0) or 0.0),
          "final_logit_softcap": float(hf.get("final_logit_softcapping", 30.0) or 0.0), "scale_embeddings": True,
          "tie_output_embedding": bool(hf.get("tie_word_embeddings", True)),
          "max_length": hf.get("max_position_embeddings", 8192), "dropout_rate": 0.0,
          "attention_dropout_rate": float(hf.get("attention_dropout") or 0.0), "qk_norm": False}


def rows(hf: dict, vocabulary: VocabularyMap) -> list[Row]:
  heads, kv_heads, head_dim = hf["num_attention_heads"], hf["num_key_value_heads"], hf["head_dim"]
  block, attn, layer = "model.layers.{i}", "model.layers.{i}.self_attn", "decoder/layer_{i}"
  vocab = tables.vocab_rows(vocabulary.pretrained_ids, vocabulary.jformer_ids)
  norms = (("input_layernorm", "self_attention_norm"), ("post_attention_layernorm", "self_attention_post_norm"),
           ("pre_feedforward_layernorm", "feed_forward_norm"), ("post_feedforward_layernorm", "feed_forward_post_norm"))
  table = [
      Row("model.embed_tokens.weight", "embedding/embedding", vocab),
      *(Row(f"{block}.{name}.weight", f"{layer}/{path}/scale") for name, path in norms),
      Row(f"{attn}.q_proj.weight", f"{layer}/self_attention/query/kernel", tables.heads_in(heads, head_dim)),
      Row(f"{attn}.k_proj.weight", f"{layer}/self_attention/key/kernel", tables.heads_in(kv_heads, head_dim)),
      Row(f"{attn}.v_proj.weight", f"{layer}/self_attention/value/kernel", tables.heads_in(kv_heads, head_dim)),
      Row(f"{attn}.o_proj.weight", f"{layer}/self_attention/out/kernel", tables.heads_out(heads, head_dim)),
      Row(f"{block}.mlp.gate_proj.weight", f"{layer}/feed_forward/wi_0/kernel", LINEAR),
      Row(f"{block}.mlp.up_proj.weight", f"{layer}/feed_forward/wi_1/kernel", LINEAR),
      Row(f"{block}.mlp.down_proj.weight", f"{layer}/feed_forward/wo/kernel", LINEAR),
      Row("model.norm.weight", "decoder/final_norm/scale"),
  ]
  if not hf.get("tie_word_embeddings", True):
    table.append(Row("lm_head.weight", "decoder/output_embedding/embedding", vocab))
  return table


GEMMA2 = register(Family(
    "gemma2", ("Gemma2ForCausalLM",), model_fields, llama.special_ids, rows,
    num_layers=lambda hf: hf["num_hidden_layers"],
    ignored=lambda hf: (r".*rotary_emb\.inv_freq",) + ((r"lm_head\.weight",) if hf.get("tie_word_embeddings", True)
                                                       else ()),
    doc="local:global layers, pre- and post-RMSNorm (1 + w), GeGLU, rotary, soft-capped logits, scaled embeddings"))
