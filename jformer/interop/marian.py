"""Marian (`MarianMTModel`; Junczys-Dowmunt et al. 2018, the OPUS-MT models): the paper's encoder-decoder.
Post-LayerNorm blocks (epsilon 1e-5, no final norm), sinusoidal positions with the sines in the first half of the
features and the cosines in the second (`model.positional_options.layout='halves'`; transformers recomputes these
tables and no longer saves them, so they are not imported), SiLU ("swish") feed-forward, biases everywhere (the key's
too: `model.qkv_bias`, inert under softmax but kept so that an export gives back every tensor), token embeddings
times sqrt(d_model) (`scale_embedding`) shared by the encoder, the decoder and the output projection, and a bias on
the output logits (`final_logits_bias`, `model.final_logits_bias`). The decoder starts from <pad> (jformer's 0), </s>
ends (1). The tokenizer is Marian's two SentencePiece models and its vocab.json (`jformer.data.pretrained_vocab`)."""

from __future__ import annotations

from jformer.data.pretrained_vocab import VocabularyMap
from jformer.interop import tables
from jformer.interop.family import Family, refuse, register, token_id
from jformer.interop.tables import LINEAR, Row, Transform

# transformers' activation names -> jformer's (`jformer.models.activations`); HF "gelu" is the exact (erf) GELU,
# which jformer's tanh approximation is not.
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu"}


def _check(hf: dict) -> None:
  """Refuses what jformer's Transformer cannot hold: stacks of different widths, separate vocabularies or
  embeddings, a pre-norm Marian, a decoder start other than <pad>."""
  for encoder, decoder in (("encoder_attention_heads", "decoder_attention_heads"),
                           ("encoder_ffn_dim", "decoder_ffn_dim")):
    if hf.get(encoder) != hf.get(decoder):
      refuse("marian", f"{encoder}={hf.get(encoder)} != {decoder}={hf.get(decoder)}: jformer's encoder and decoder "
             "have one width")
  if hf.get("decoder_vocab_size") not in (None, hf["vocab_size"]) or not hf.get("share_encoder_decoder_embeddings",
                                                                                  True):
    refuse("marian", "separate source and target vocabularies are not imported (jformer shares one embedding)")
  if not hf.get("tie_word_embeddings", True):
    refuse("marian", "tie_word_embeddings=False is not imported (the output projection is the shared embedding)")
  if hf.get("normalize_before") or hf.get("add_final_layer_norm") or hf.get("normalize_embedding"):
    refuse("marian", "a pre-norm block or an embedding norm is not imported (Marian's is post-norm)")
  if token_id(hf.get("decoder_start_token_id")) != token_id(hf.get("pad_token_id")):
    refuse("marian", f"decoder_start_token_id={hf.get('decoder_start_token_id')} is not pad_token_id="
           f"{hf.get('pad_token_id')}: jformer's padding id is also the decoder's start")
  if hf.get("activation_function", "gelu") not in ACTIVATIONS:
    refuse("marian", f"activation_function='{hf.get('activation_function', 'gelu')}' is not one of "
           f"{sorted(ACTIVATIONS)} (jformer's gelu is the tanh approximation)")


def model_fields(hf: dict) -> dict:
  _check(hf)
  return {"architecture": "transformer", "d_model": hf["d_model"], "num_heads": hf["encoder_attention_heads"],
          "num_kv_heads": 0, "d_ff": hf["encoder_ffn_dim"], "num_encoder_layers": hf["encoder_layers"],
          "num_decoder_layers": hf["decoder_layers"], "norm": "post", "normalization": "layernorm",
          "norm_epsilon": 1e-5, "final_norm": True, "activation": ACTIVATIONS[hf.get("activation_function", "gelu")],
          "positional": "sinusoidal", "positional_options": {"layout": "halves"}, "use_bias": True, "qkv_bias": True,
          "attention": "auto", "scale_embeddings": bool(hf.get("scale_embedding", False)), "share_embeddings": True,
          "tie_output_embedding": True, "final_logits_bias": True,
          "max_length": hf.get("max_position_embeddings", 1024), "dropout_rate": float(hf.get("dropout", 0.1)),
          "attention_dropout_rate": float(hf.get("attention_dropout", 0.0)), "qk_norm": False}


def special_ids(hf: dict) -> tuple[int, int]:
  """(<pad>, </s>): Marian's decoder starts from its padding token."""
  return token_id(hf.get("pad_token_id")), token_id(hf.get("eos_token_id"))


def _attention_rows(hf_prefix: str, jformer_prefix: str, heads: int, head_dim: int) -> list[Row]:
  rows = [Row(f"{hf_prefix}.out_proj.weight", f"{jformer_prefix}/out/kernel", tables.heads_out(heads, head_dim)),
          Row(f"{hf_prefix}.out_proj.bias", f"{jformer_prefix}/out/bias")]
  for hf_name, name in (("q", "query"), ("k", "key"), ("v", "value")):
    rows += [Row(f"{hf_prefix}.{hf_name}_proj.weight", f"{jformer_prefix}/{name}/kernel",
                 tables.heads_in(heads, head_dim)),
             Row(f"{hf_prefix}.{hf_name}_proj.bias", f"{jformer_prefix}/{name}/bias",
                 tables.heads_bias(heads, head_dim))]
  return rows


def _norm_rows(hf_name: str, jformer_name: str) -> list[Row]:
  return [Row(f"{hf_name}.weight", f"{jformer_name}/scale"), Row(f"{hf_name}.bias", f"{jformer_name}/bias")]


def rows(hf: dict, vocabulary: VocabularyMap) -> list[Row]:
  """The table, each layer's rows written out (the encoder's and the decoder's depths may differ)."""
  heads, d_model = hf["encoder_attention_heads"], hf["d_model"]
  head_dim = d_model // heads
  vocab = tables.vocab_rows(vocabulary.pretrained_ids, vocabulary.jformer_ids)
  table = [Row("model.shared.weight", "shared_embedding/embedding", vocab),
           Row("final_logits_bias", "decoder/final_logits_bias",
               Transform(lambda b: (b.reshape(-1)[vocabulary.pretrained_ids],),
                         lambda b: (b[vocabulary.jformer_ids][None, :],)))]
  for stack, count in (("encoder", hf["encoder_layers"]), ("decoder", hf["decoder_layers"])):
    sublayers = [("self_attn", "self_attention")] + ([("encoder_attn", "cross_attention")] if stack == "decoder"
                                                      else [])
    for i in range(count):
      block, layer = f"model.{stack}.layers.{i}", f"{stack}/layer_{i}"
      for hf_name, name in sublayers:
        table += _attention_rows(f"{block}.{hf_name}", f"{layer}/{name}", heads, head_dim)
        table += _norm_rows(f"{block}.{hf_name}_layer_norm", f"{layer}/{name}_norm")
      table += [Row(f"{block}.fc1.weight", f"{layer}/feed_forward/wi/kernel", LINEAR),
                Row(f"{block}.fc1.bias", f"{layer}/feed_forward/wi/bias"),
                Row(f"{block}.fc2.weight", f"{layer}/feed_forward/wo/kernel", LINEAR),
                Row(f"{block}.fc2.bias", f"{layer}/feed_forward/wo/bias")]
      table += _norm_rows(f"{block}.final_layer_norm", f"{layer}/feed_forward_norm")
  return table


MARIAN = register(Family(
    "marian", ("MarianMTModel",), model_fields, special_ids, rows, num_layers=lambda hf: 0,
    ignored=lambda hf: (r"model\.(encoder|decoder)\.embed_positions\.weight",
                        r"(model\.(encoder|decoder)\.embed_tokens|lm_head)\.weight"),
    doc="encoder-decoder, post-LayerNorm, sinusoidal positions in halves, SiLU, shared embeddings, a logits bias",
    fine_tuning={"data.dataset": "parallel_text", "data.max_length": 128}))
