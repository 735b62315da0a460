"""The Llama family: `LlamaForCausalLM` (Llama 1-3.x), `MistralForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM`
(Touvron et al. 2023; Llama 3 report 2024; Jiang et al. 2023; Qwen team 2024, 2025). A decoder-only model of
pre-RMSNorm blocks, SwiGLU feed-forward, rotary positions (half-split pairs, as `jformer.ops.positional.apply_rotary`)
with base `rope_theta` and the rope scalings 'linear', 'dynamic', 'llama3' (Llama 3.1+) and 'yarn'
(`jformer.interop.rope`), grouped-query attention, no biases (Qwen2: query/key/value biases, `model.qkv_bias`),
unscaled token embeddings, tied or untied output embedding; Mistral's sliding window is the `local` variant (each
query sees the last `sliding_window` keys, itself included). Qwen3: an RMSNorm of each query and key head before
rotary (`model.qk_norm`; q_norm, k_norm) and heads of `head_dim` whatever hidden_size / num_attention_heads is
(`model.head_dim`); its sliding windows are refused."""

from __future__ import annotations

from jformer.data.pretrained_vocab import VocabularyMap
from jformer.interop import tables
from jformer.interop.family import Family, refuse, register, token_id
from jformer.interop.rope import rotary_options
from jformer.interop.tables import LINEAR, Row

QWEN_WINDOWS = ("qwen2", "qwen3")  # configs whose use_sliding_window sets windows in some layers.


def _biases(hf: dict, name: str) -> dict:
  """`model.use_bias` / `model.qkv_bias` from Llama's attention_bias/mlp_bias, or Qwen2's q/k/v biases."""
  if hf.get("model_type") == "qwen2":
    return {"use_bias": False, "qkv_bias": True}
  if hf.get("model_type") == "qwen3" and hf.get("attention_bias"):
    refuse(name, "attention_bias=True (biases on q/k/v/o, none in the MLP) is not imported")
  attention, mlp = bool(hf.get("attention_bias", False)), bool(hf.get("mlp_bias", False))
  if attention != mlp:
    refuse(name, f"attention_bias={attention} with mlp_bias={mlp}: jformer's block has biases in both or neither")
  return {"use_bias": attention, "qkv_bias": attention}


def _attention(hf: dict, name: str) -> dict:
  """'auto', or Mistral's sliding window as `local`; Qwen2's and Qwen3's per-layer windows are refused."""
  if hf.get("model_type") in QWEN_WINDOWS:
    if hf.get("use_sliding_window"):
      refuse(name, "use_sliding_window=True (windows in some layers) is not imported yet")
    kinds = sorted(set(hf.get("layer_types") or ["full_attention"]) - {"full_attention"})
    if kinds:
      refuse(name, f"layer_types lists {kinds}: only full_attention layers are imported")
    return {"attention": "auto"}
  window = hf.get("sliding_window")
  if window is None or window >= hf.get("max_position_embeddings", 0):
    return {"attention": "auto"}
  return {"attention": "local", "attention_options": {"window_size": int(window)}}


def _head_dim(hf: dict) -> int:
  """config.json's `head_dim`, or hidden_size / num_attention_heads (as transformers)."""
  return hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]


def model_fields(hf: dict) -> dict:
  name = hf.get("model_type", "llama")
  heads, d_model, head_dim = hf["num_attention_heads"], hf["hidden_size"], _head_dim(hf)
  if hf.get("hidden_act", "silu") != "silu":
    refuse(name, f"hidden_act='{hf['hidden_act']}' (jformer's gated feed-forward here is SwiGLU, silu)")
  kv_heads = hf.get("num_key_value_heads") or heads
  return {"architecture": "lm", "d_model": d_model, "num_heads": heads,
          "head_dim": 0 if head_dim * heads == d_model else head_dim,
          "num_kv_heads": 0 if kv_heads == heads else kv_heads, "d_ff": hf["intermediate_size"],
          "num_encoder_layers": 0, "num_decoder_layers": hf["num_hidden_layers"],
          "norm": "pre", "normalization": "rmsnorm", "norm_epsilon": float(hf.get("rms_norm_eps", 1e-6)),
          "final_norm": True, "activation": "swiglu", "positional": "rotary",
          "positional_options": rotary_options(hf, name), **_biases(hf, name), **_attention(hf, name),
          "scale_embeddings": False, "tie_output_embedding": bool(hf.get("tie_word_embeddings", False)),
          "max_length": hf.get("max_position_embeddings", 2048), "dropout_rate": 0.0,
          "attention_dropout_rate": float(hf.get("attention_dropout", 0.0)), "qk_norm": name == "qwen3"}


def special_ids(hf: dict) -> tuple[int, int]:
  """(BOS, EOS); a model without a BOS (Qwen2) starts from its EOS, as its pretraining separated documents."""
  end = token_id(hf.get("eos_token_id"))
  if end is None:
    refuse(hf.get("model_type", "llama"), "no eos_token_id: which token ends a sequence?")
  start = token_id(hf.get("bos_token_id"))
  return (end if start is None else start), end


def rows(hf: dict, vocabulary: VocabularyMap) -> list[Row]:
  heads = hf["num_attention_heads"]
  kv_heads, head_dim = hf.get("num_key_value_heads") or heads, _head_dim(hf)
  fields = model_fields(hf)
  attn, layer = "model.layers.{i}.self_attn", "decoder/layer_{i}"
  vocab = tables.vocab_rows(vocabulary.pretrained_ids, vocabulary.jformer_ids)
  table = [
      Row("model.embed_tokens.weight", "embedding/embedding", vocab),
      Row("model.layers.{i}.input_layernorm.weight", f"{layer}/self_attention_norm/scale"),
      Row(f"{attn}.q_proj.weight", f"{layer}/self_attention/query/kernel", tables.heads_in(heads, head_dim)),
      Row(f"{attn}.k_proj.weight", f"{layer}/self_attention/key/kernel", tables.heads_in(kv_heads, head_dim)),
      Row(f"{attn}.v_proj.weight", f"{layer}/self_attention/value/kernel", tables.heads_in(kv_heads, head_dim)),
      Row(f"{attn}.o_proj.weight", f"{layer}/self_attention/out/kernel", tables.heads_out(heads, head_dim)),
      Row("model.layers.{i}.post_attention_layernorm.weight", f"{layer}/feed_forward_norm/scale"),
      Row("model.layers.{i}.mlp.gate_proj.weight", f"{layer}/feed_forward/wi_0/kernel", LINEAR),
      Row("model.layers.{i}.mlp.up_proj.weight", f"{layer}/feed_forward/wi_1/kernel", LINEAR),
      Row("model.layers.{i}.mlp.down_proj.weight", f"{layer}/feed_forward/wo/kernel", LINEAR),
      Row("model.norm.weight", "decoder/final_norm/scale"),
  ]
  if fields["qk_norm"]:
    table += [Row(f"{attn}.q_norm.weight", f"{layer}/self_attention/query_norm/scale"),
              Row(f"{attn}.k_norm.weight", f"{layer}/self_attention/key_norm/scale")]
  if fields["qkv_bias"]:
    table += [Row(f"{attn}.{p}_proj.bias", f"{layer}/self_attention/{j}/bias", tables.heads_bias(n, head_dim))
              for p, j, n in (("q", "query", heads), ("k", "key", kv_heads), ("v", "value", kv_heads))]
  if fields["use_bias"]:
    table += [Row(f"{attn}.o_proj.bias", f"{layer}/self_attention/out/bias")]
    table += [Row(f"model.layers.{{i}}.mlp.{p}_proj.bias", f"{layer}/feed_forward/{j}/bias")
              for p, j in (("gate", "wi_0"), ("up", "wi_1"), ("down", "wo"))]
  if not fields["tie_output_embedding"]:
    table.append(Row("lm_head.weight", "decoder/output_embedding/embedding", vocab))
  return table


LLAMA = register(Family(
    "llama", ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"), model_fields,
    special_ids, rows,
    num_layers=lambda hf: hf["num_hidden_layers"],
    ignored=lambda hf: (r".*rotary_emb\.inv_freq",) + ((r"lm_head\.weight",) if hf.get("tie_word_embeddings") else ()),
    doc="pre-RMSNorm, SwiGLU, rotary (rope scaling linear, dynamic, llama3, yarn), grouped-query attention (Qwen2: "
        "q/k/v biases; Qwen3: QK-norm, head_dim; Mistral: sliding window)"))
