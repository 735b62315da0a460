"""GPT-2 (`GPT2LMHeadModel`; Radford et al. 2019): a decoder-only model of pre-LayerNorm blocks (epsilon 1e-5), learned
absolute positions (`learned`), GELU's tanh approximation ("gelu_new", jformer's `gelu`), biases everywhere, unscaled
token embeddings tied to the output. Its layers are `Conv1D`s, weight [in, out]; the query, key and value share one
(`c_attn`, [D, 3 D]). The key bias is not imported: q.(k + b) shifts every logit of a query by q.b, which softmax
ignores (an export writes zeros). <|endoftext|> both starts and ends, so jformer has one id more
(`jformer.data.pretrained_vocab`)."""

from __future__ import annotations

import numpy as np

from jformer.data.pretrained_vocab import VocabularyMap
from jformer.interop import tables
from jformer.interop.family import Family, refuse, register, token_id
from jformer.interop.tables import Row, Transform


def model_fields(hf: dict) -> dict:
  if hf.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
    refuse("gpt2", f"activation_function='{hf['activation_function']}' (jformer's gelu is the tanh approximation)")
  for option in ("scale_attn_by_inverse_layer_idx", "add_cross_attention"):
    if hf.get(option):
      refuse("gpt2", f"{option}=True has no jformer block")
  if not hf.get("scale_attn_weights", True):
    refuse("gpt2", "scale_attn_weights=False (jformer's dot_product scales by 1/sqrt(d_k))")
  d_model = hf["n_embd"]
  return {"architecture": "lm", "d_model": d_model, "num_heads": hf["n_head"], "num_kv_heads": 0,
          "d_ff": hf.get("n_inner") or 4 * d_model, "num_encoder_layers": 0, "num_decoder_layers": hf["n_layer"],
          "norm": "pre", "normalization": "layernorm", "norm_epsilon": float(hf.get("layer_norm_epsilon", 1e-5)),
          "final_norm": True, "activation": "gelu", "positional": "learned", "use_bias": True, "qkv_bias": False,
          "attention": "auto", "scale_embeddings": False, "tie_output_embedding": True,
          "max_length": hf.get("n_positions", 1024), "dropout_rate": float(hf.get("resid_pdrop", 0.1)),
          "attention_dropout_rate": float(hf.get("attn_pdrop", 0.1)), "qk_norm": False}


def special_ids(hf: dict) -> tuple[int, int]:
  end = token_id(hf.get("eos_token_id", 50256))
  start = token_id(hf.get("bos_token_id"))
  return (end if start is None else start), end


def _qkv(heads: int, head_dim: int) -> tuple[Transform, Transform]:
  """c_attn's weight [D, 3 D] <-> query, key, value kernels [D, H, K]; its bias [3 D] <-> query, value biases [H, K]
  (the key's dropped; zeros on the way back)."""
  d = heads * head_dim

  def split(x):
    return tuple(part.reshape(*x.shape[:-1], heads, head_dim) for part in np.split(x, 3, axis=-1))

  weight = Transform(split, lambda q, k, v: (np.concatenate([x.reshape(x.shape[0], d) for x in (q, k, v)], -1),))
  bias = Transform(lambda b: split(b)[::2],
                   lambda q, v: (np.concatenate([q.reshape(d), np.zeros(d, q.dtype), v.reshape(d)]),))
  return weight, bias


def rows(hf: dict, vocabulary: VocabularyMap) -> list[Row]:
  heads, d_model = hf["n_head"], hf["n_embd"]
  head_dim = d_model // heads
  qkv_weight, qkv_bias = _qkv(heads, head_dim)
  block, layer = "transformer.h.{i}", "decoder/layer_{i}"
  attention = f"{layer}/self_attention"
  return [
      Row("transformer.wte.weight", "embedding/embedding",
          tables.vocab_rows(vocabulary.pretrained_ids, vocabulary.jformer_ids)),
      Row("transformer.wpe.weight", "decoder/positions/position_embedding"),
      Row(f"{block}.ln_1.weight", f"{layer}/self_attention_norm/scale"),
      Row(f"{block}.ln_1.bias", f"{layer}/self_attention_norm/bias"),
      Row(f"{block}.attn.c_attn.weight", tuple(f"{attention}/{p}/kernel" for p in ("query", "key", "value")),
          qkv_weight),
      Row(f"{block}.attn.c_attn.bias", (f"{attention}/query/bias", f"{attention}/value/bias"), qkv_bias),
      Row(f"{block}.attn.c_proj.weight", f"{attention}/out/kernel",
          Transform(lambda w: (w.reshape(heads, head_dim, d_model),), lambda w: (w.reshape(d_model, d_model),))),
      Row(f"{block}.attn.c_proj.bias", f"{attention}/out/bias"),
      Row(f"{block}.ln_2.weight", f"{layer}/feed_forward_norm/scale"),
      Row(f"{block}.ln_2.bias", f"{layer}/feed_forward_norm/bias"),
      Row(f"{block}.mlp.c_fc.weight", f"{layer}/feed_forward/wi/kernel"),
      Row(f"{block}.mlp.c_fc.bias", f"{layer}/feed_forward/wi/bias"),
      Row(f"{block}.mlp.c_proj.weight", f"{layer}/feed_forward/wo/kernel"),
      Row(f"{block}.mlp.c_proj.bias", f"{layer}/feed_forward/wo/bias"),
      Row("transformer.ln_f.weight", "decoder/final_norm/scale"),
      Row("transformer.ln_f.bias", "decoder/final_norm/bias"),
  ]


GPT2 = register(Family(
    "gpt2", ("GPT2LMHeadModel",), model_fields, special_ids, rows, num_layers=lambda hf: hf["n_layer"],
    ignored=lambda hf: (r"transformer\.h\.\d+\.attn\.(bias|masked_bias)", r"lm_head\.weight"),
    doc="pre-LayerNorm, learned positions, tanh GELU, tied embeddings"))
