"""Makes the golden fixtures of `tests/test_interop_golden.py`: small random-weight Hugging Face models of each family
imported by jformer, with transformers' float32 outputs on them, so CI (which has no torch) checks the conversion.

    pip install -e '.[hf]'   # torch (CPU), transformers
    python tests/golden/make_fixtures.py [--out=tests/golden/hf]

Per family, `<out>/<name>/` is a Hugging Face folder (`save_pretrained`: config.json, model.safetensors with float16
weights, so that the files stay small; transformers and jformer both compute in float32 from them) with a byte-level
BPE tokenizer.json (Marian: SentencePiece models of each side, source.spm and target.spm, and vocab.json), and
`golden.npz` holds:
  input_ids `[B, T]`, attention_mask `[B, T]`: pretrained ids, each row the start token then random tokens, right
    padded (Marian: the decoder's input rows);
  source_ids `[B, S]`, source_mask `[B, S]` (Marian only): random source rows ending with </s>, right padded;
  logits `[B, T, V]`: transformers' float32 logits for them (`model(input_ids, attention_mask=...)`; Marian:
    `model(source_ids, source_mask, decoder_input_ids=input_ids, decoder_attention_mask=attention_mask)`);
  prompt_ids `[B, P]`, greedy_ids `[B, N]`: random prompts and the N tokens greedy decoding adds after the start
    token and the prompt (argmax of a full forward pass per token, the start token never chosen: jformer's decoders
    never predict id 0, unless the start token also ends, when jformer has an id of its own for it); Marian: random
    sources and the first N tokens of their greedy translations;
  texts, text_ids, target_text_ids (Marian only): sentences, and transformers' `MarianTokenizer` ids of them on the
    source side and the target side.
`<out>/../rope_frequencies.json` (`--only rope`) holds transformers' `ROPE_INIT_FUNCTIONS` outputs (inverse
frequencies, attention factor) for the rope scalings of `ROPE_CASES` (tests/test_positional_rotary_scaling.py).
The weights are drawn at scales that give logits of order 1 (transformers' initializer would give near-uniform
distributions, which match whatever the conversion does), norm scales and biases away from 1 and 0.

This script needs torch and transformers; it lives with the tests, outside the installed package.
"""

from __future__ import annotations

import argparse
import pathlib

import numpy as np

VOCAB = 272  # 256 bytes, 3 special tokens and a few merges of a byte-level BPE.
SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2 (Llama's layout).
TEXT = ("The old lighthouse keeper climbed the stairs every evening. He lit the lamp, watched the ships pass, and "
        "wrote in his log what the sea had done that day. ") * 4
SMALL = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64, bos_token_id=1, eos_token_id=2)

LLAMA3_ROPE = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=16)
# name -> (model class, config class, config values): one of each family, varied where the conversion has a choice.
FAMILIES = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", dict(SMALL, num_key_value_heads=2, rms_norm_eps=1e-5,
                                                      rope_theta=500.0, tie_word_embeddings=False)),
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(SMALL, num_key_value_heads=1, sliding_window=4,
                                                            rope_theta=10000.0, tie_word_embeddings=True)),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(SMALL, num_key_value_heads=2, rope_theta=1e6,
                                                      bos_token_id=None, tie_word_embeddings=True)),
    # Gemma 2: a head_dim apart from hidden_size / heads, a logit scale apart from it, local:global:local layers with a
    # window shorter than the rows, soft-caps low enough to act on logits of order 1.
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config", dict(SMALL, num_hidden_layers=3, num_key_value_heads=2,
                                                         head_dim=16, query_pre_attn_scalar=24, sliding_window=4,
                                                         attn_logit_softcapping=5.0, final_logit_softcapping=4.0,
                                                         rope_theta=10000.0, pad_token_id=0)),
    # Llama 3.x's rope scaling, its wavelengths against a short original length so that every frequency changes.
    "llama3": ("LlamaForCausalLM", "LlamaConfig", dict(SMALL, num_key_value_heads=2, tie_word_embeddings=True,
                                                       rope_parameters=dict(LLAMA3_ROPE, rope_theta=10000.0))),
    # Qwen3: QK-norm, a head_dim of 16 (not 32 / 4), and YaRN over a short original length.
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(SMALL, num_key_value_heads=2, head_dim=16, bos_token_id=None,
                                                      tie_word_embeddings=True, rope_parameters=dict(
                                                          rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                                          original_max_position_embeddings=16))),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(vocab_size=VOCAB, n_embd=32, n_inner=64, n_layer=2, n_head=4,
                                                   n_positions=64, bos_token_id=2, eos_token_id=2)),
}


# Marian: a small vocabulary (two SentencePiece models' pieces in one vocab.json), config values of an OPUS-MT model
# at a small size; the encoder deeper than the decoder, as the conversion writes each stack's layers out.
MARIAN = dict(d_model=32, encoder_layers=3, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
              encoder_ffn_dim=64, decoder_ffn_dim=64, activation_function="swish", scale_embedding=True,
              max_position_embeddings=64, eos_token_id=0, forced_eos_token_id=0)
TARGET_TEXT = ("Der alte Leuchtturmwärter stieg jeden Abend die Treppe hinauf. Er zündete die Lampe an, sah die "
               "Schiffe vorbeifahren und schrieb in sein Buch, was das Meer an diesem Tag getan hatte. ") * 4


def sentencepiece_model(text: str, vocab_size: int) -> bytes:
  """A unigram SentencePiece model of `vocab_size` pieces trained on the sentences of `text`, without normalization."""
  import io

  import sentencepiece as spm

  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(text.replace(". ", ".\n").splitlines()), model_writer=model,
                                 vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
                                 normalization_rule_name="identity", minloglevel=2)  # no NFKC tables: 1 KB, not 240.
  return model.getvalue()


def marian_vocabulary(*models: bytes) -> dict[str, int]:
  """Marian's vocab.json: </s> 0, <unk> 1, every piece of the models once, <pad> last."""
  import sentencepiece as spm

  pieces = {}
  for proto in models:
    processor = spm.SentencePieceProcessor(model_proto=proto)
    pieces.update((processor.id_to_piece(i), None) for i in range(processor.get_piece_size())
                  if not (processor.is_control(i) or processor.is_unknown(i)))
  vocab = ["</s>", "<unk>", *pieces, "<pad>"]
  return {piece: i for i, piece in enumerate(vocab)}


def tokenizer_json() -> str:
  """A byte-level BPE of `VOCAB` ids (the specials first) trained on `TEXT`."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

  tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
  tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tokenizer.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tokenizer.train_from_iterator([TEXT], trainer)
  return tokenizer.to_str()


# Families whose norms scale by 1 + weight (Gemma 2's RMSNorm): their weights are drawn around 0.
OFFSET_NORMS = ("gemma2",)


def randomize(model, seed: int) -> None:
  """Every weight drawn again: matrices N(0, 1/fan_in), embeddings N(0, 1/d_model), norm scales 1 + N(0, 0.2^2)
  (the weight N(0, 0.2^2) where the norm adds the 1: `OFFSET_NORMS`), biases N(0, 0.2^2)."""
  import torch

  generator = torch.Generator().manual_seed(seed)
  offset = 0.0 if model.config.model_type in OFFSET_NORMS else 1.0
  with torch.no_grad():
    for name, param in sorted(model.named_parameters()):
      noise = torch.randn(param.shape, generator=generator)
      if name.endswith("bias"):
        param.copy_(0.2 * noise)
      elif param.ndim == 1:
        param.copy_(offset + 0.2 * noise)
      elif "embed" in name or "wte" in name or "wpe" in name or "shared" in name:
        param.copy_(noise / param.shape[-1] ** 0.5)
      else:
        param.copy_(noise / param.shape[1] ** 0.5)


def greedy(model, prompts: np.ndarray, start: int, steps: int, end: int) -> np.ndarray:
  """N tokens of greedy decoding after [start] + each prompt, a full forward pass per token; the start token never
  chosen unless it is also the end token (jformer gives it an id of its own then)."""
  import torch

  ids = torch.tensor(np.concatenate([np.full((len(prompts), 1), start), prompts], 1))
  out = []
  with torch.no_grad():
    for _ in range(steps):
      logits = model(ids).logits[:, -1].clone()
      if start != end:
        logits[:, start] = -float("inf")
      token = logits.argmax(-1, keepdim=True)
      out.append(token)
      ids = torch.cat([ids, token], 1)
  return torch.cat(out, 1).numpy()


def make_marian(out: pathlib.Path, seed: int = 0) -> None:
  """The Marian fixture (module doc): a MarianMTModel with its tokenizer files, transformers' logits on padded source
  and target rows, greedy translations, and MarianTokenizer's ids."""
  import json

  import torch
  import transformers

  folder = out / "marian"
  folder.mkdir(parents=True, exist_ok=True)
  source, target = sentencepiece_model(TEXT, 40), sentencepiece_model(TARGET_TEXT, 40)
  vocab = marian_vocabulary(source, target)
  (folder / "source.spm").write_bytes(source)
  (folder / "target.spm").write_bytes(target)
  (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1))
  size = len(vocab)
  pad = size - 1
  config = transformers.MarianConfig(vocab_size=size, pad_token_id=pad, decoder_start_token_id=pad, **MARIAN)
  model = transformers.MarianMTModel(config).float().eval()
  randomize(model, seed)
  with torch.no_grad():
    model.final_logits_bias.copy_(0.2 * torch.randn(model.final_logits_bias.shape,
                                                    generator=torch.Generator().manual_seed(seed + 1)))
  model.half().save_pretrained(folder)
  model = transformers.MarianMTModel.from_pretrained(folder, dtype=torch.float32).eval()
  rng = np.random.default_rng(seed)

  def rows(lengths, length, first=None):
    """Right-padded rows of random ids (never <pad> or </s>) of these lengths: `first` before, or </s> last."""
    ids = rng.integers(1, pad, (len(lengths), length))
    if first is None:
      ids[np.arange(len(lengths)), np.asarray(lengths) - 1] = config.eos_token_id
    else:
      ids[:, 0] = first
    mask = (np.arange(length)[None] < np.asarray(lengths)[:, None]).astype(np.int64)
    return np.where(mask == 1, ids, pad), mask

  source_ids, source_mask = rows([7, 4], 7)
  input_ids, attention_mask = rows([6, 3], 6, first=pad)
  with torch.no_grad():
    logits = model(torch.tensor(source_ids), attention_mask=torch.tensor(source_mask),
                   decoder_input_ids=torch.tensor(input_ids),
                   decoder_attention_mask=torch.tensor(attention_mask)).logits.numpy()
  prompts, _ = rows([5, 5], 5)
  tokenizer = transformers.MarianTokenizer(source_spm=str(folder / "source.spm"),
                                           target_spm=str(folder / "target.spm"), vocab=str(folder / "vocab.json"))
  texts = ["The keeper lit the lamp.", "He wrote what the sea had done."]
  np.savez_compressed(folder / "golden.npz", input_ids=input_ids, attention_mask=attention_mask,
                      source_ids=source_ids, source_mask=source_mask, logits=logits.astype(np.float32),
                      prompt_ids=prompts, greedy_ids=greedy_translations(model, prompts, pad, 6), texts=texts,
                      text_ids=np.array(tokenizer(texts, padding=True)["input_ids"]),
                      target_text_ids=np.array(tokenizer(text_target=texts, padding=True)["input_ids"]))
  print(f"{folder}: {sum(f.stat().st_size for f in folder.iterdir()) / 1024:.0f} KB")


def greedy_translations(model, sources: np.ndarray, start: int, steps: int) -> np.ndarray:
  """N tokens of greedy decoding of an encoder-decoder for each source row, a full forward pass per token, the start
  token (<pad>) never chosen."""
  import torch

  ids = torch.full((len(sources), 1), start)
  out = []
  with torch.no_grad():
    for _ in range(steps):
      logits = model(torch.tensor(sources), decoder_input_ids=ids).logits[:, -1].clone()
      logits[:, start] = -float("inf")
      token = logits.argmax(-1, keepdim=True)
      out.append(token)
      ids = torch.cat([ids, token], 1)
  return torch.cat(out, 1).numpy()


# transformers' rope_init_fn cases of `rope_frequencies.json`: (head_dim, max_position_embeddings, rope_parameters,
# seq_len of a forward pass (the dynamic type's)). Llama 3.1's and Qwen3's published settings, gpt-oss-like YaRN
# (truncate=False), an explicit attention factor, and the fixtures' own.
ROPE_CASES = [
    (64, 2048, dict(rope_type="linear", rope_theta=10000.0, factor=4.0), None),
    (128, 131072, dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                       original_max_position_embeddings=8192), None),
    (64, 4096, dict(rope_type="llama3", rope_theta=10000.0, factor=32.0, low_freq_factor=2.0, high_freq_factor=8.0,
                    original_max_position_embeddings=256), None),
    (8, 64, dict(LLAMA3_ROPE, rope_theta=10000.0), None),
    (128, 131072, dict(rope_type="yarn", rope_theta=1e6, factor=4.0, original_max_position_embeddings=32768), None),
    (64, 131072, dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                      truncate=False, original_max_position_embeddings=4096), None),
    (32, 8192, dict(rope_type="yarn", rope_theta=10000.0, factor=2.0, attention_factor=1.25, beta_fast=16.0,
                    beta_slow=2.0, original_max_position_embeddings=2048), None),
    (16, 64, dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16), None),
] + [(64, 64, dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0), n) for n in (1, 64, 65, 100, 1000)]


def make_rope_frequencies(out: pathlib.Path) -> None:
  """`<out>/../rope_frequencies.json`: per case of ROPE_CASES, its config.json fields and transformers'
  `ROPE_INIT_FUNCTIONS[rope_type]` outputs: inv_freq `[head_dim / 2]` and attention_factor."""
  import json

  import torch
  import transformers
  from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

  cases = []
  for head_dim, max_positions, rope, seq_len in ROPE_CASES:
    fields = dict(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                  max_position_embeddings=max_positions, rope_parameters=dict(rope))
    config = transformers.LlamaConfig(**fields)
    length = None if seq_len is None else torch.tensor(seq_len)  # as `dynamic_rope_update` passes it.
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config, "cpu", seq_len=length)
    cases.append(dict(config=fields, seq_len=seq_len, inv_freq=inv_freq.float().tolist(),
                      attention_factor=float(attention_factor)))
  path = out.parent / "rope_frequencies.json"
  path.write_text(json.dumps({"transformers": transformers.__version__, "cases": cases}, indent=1) + "\n")
  print(f"{path}: {path.stat().st_size / 1024:.0f} KB")


def make(name: str, out: pathlib.Path, seed: int = 0) -> None:
  if name == "marian":
    return make_marian(out, seed)
  if name == "rope":
    return make_rope_frequencies(out)
  import torch
  import transformers

  architecture, config_class, values = FAMILIES[name]
  model = getattr(transformers, architecture)(getattr(transformers, config_class)(**values)).float().eval()
  randomize(model, seed)
  folder = out / name
  folder.mkdir(parents=True, exist_ok=True)
  model.half().save_pretrained(folder)
  # Read back in float32 (not `model.float()`: half() rounded its rotary frequencies too, which a load recomputes).
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
  (folder / "tokenizer.json").write_text(tokenizer_json())
  rng = np.random.default_rng(seed)
  start = values["bos_token_id"] if values["bos_token_id"] is not None else values["eos_token_id"]
  lengths, length = np.array([8, 5]), 8
  body = rng.integers(3, VOCAB, (2, length - 1))
  input_ids = np.concatenate([np.full((2, 1), start), body], 1)
  mask = (np.arange(length)[None] < lengths[:, None]).astype(np.int64)
  input_ids = np.where(mask == 1, input_ids, 0)
  with torch.no_grad():
    logits = model(torch.tensor(input_ids), attention_mask=torch.tensor(mask)).logits.numpy()
  prompts = rng.integers(3, VOCAB, (2, 3))
  np.savez_compressed(folder / "golden.npz", input_ids=input_ids, attention_mask=mask, logits=logits.astype(np.float32),
                      prompt_ids=prompts, greedy_ids=greedy(model, prompts, start, 6, values["eos_token_id"]))
  print(f"{folder}: {sum(f.stat().st_size for f in folder.iterdir()) / 1024:.0f} KB")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default="tests/golden/hf", help="the fixtures' folder")
  parser.add_argument("--only", nargs="*", default=sorted([*FAMILIES, "marian", "rope"]), help="families to make")
  args = parser.parse_args(argv)
  for name in args.only:
    make(name, pathlib.Path(args.out))


if __name__ == "__main__":
  main()
