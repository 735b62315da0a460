"""Makes the golden fixtures of `tests/test_interop_golden.py`: small random-weight Hugging Face models of each family
imported by jformer, with transformers' float32 outputs on them, so CI (which has no torch) checks the conversion.

    pip install -e '.[hf]'   # torch (CPU), transformers
    python -m jformer.interop.make_fixtures [--out=tests/golden/hf]

Per family, `<out>/<name>/` is a Hugging Face folder (`save_pretrained`: config.json, model.safetensors with float16
weights, so that the files stay small; transformers and jformer both compute in float32 from them) with a byte-level
BPE tokenizer.json, and `golden.npz` holds:
  input_ids `[B, T]`, attention_mask `[B, T]`: pretrained ids, each row the start token then random tokens, right
    padded;
  logits `[B, T, V]`: transformers' float32 logits for them (`model(input_ids, attention_mask=...)`);
  prompt_ids `[B, P]`, greedy_ids `[B, N]`: random prompts and the N tokens greedy decoding adds after the start
    token and the prompt (argmax of a full forward pass per token, the start token never chosen: jformer's decoders
    never predict id 0, unless the start token also ends, when jformer has an id of its own for it).
The weights are drawn at scales that give logits of order 1 (transformers' initializer would give near-uniform
distributions, which match whatever the conversion does), norm scales and biases away from 1 and 0.

This module needs torch and transformers; jformer never imports it.
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

# name -> (model class, config class, config values): one of each family, varied where the conversion has a choice.
FAMILIES = {
    "llama": ("LlamaForCausalLM", "LlamaConfig", dict(SMALL, num_key_value_heads=2, rms_norm_eps=1e-5,
                                                      rope_theta=500.0, tie_word_embeddings=False)),
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(SMALL, num_key_value_heads=1, sliding_window=4,
                                                            rope_theta=10000.0, tie_word_embeddings=True)),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(SMALL, num_key_value_heads=2, rope_theta=1e6,
                                                      bos_token_id=None, tie_word_embeddings=True)),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(vocab_size=VOCAB, n_embd=32, n_inner=64, n_layer=2, n_head=4,
                                                   n_positions=64, bos_token_id=2, eos_token_id=2)),
}


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


def randomize(model, seed: int) -> None:
  """Every weight drawn again: matrices N(0, 1/fan_in), embeddings N(0, 1/d_model), norm scales 1 + N(0, 0.2^2),
  biases N(0, 0.2^2)."""
  import torch

  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, param in sorted(model.named_parameters()):
      noise = torch.randn(param.shape, generator=generator)
      if name.endswith("bias"):
        param.copy_(0.2 * noise)
      elif param.ndim == 1:
        param.copy_(1.0 + 0.2 * noise)
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


def make(name: str, out: pathlib.Path, seed: int = 0) -> None:
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
  parser.add_argument("--only", nargs="*", default=sorted(FAMILIES), help="families to make")
  args = parser.parse_args(argv)
  for name in args.only:
    make(name, pathlib.Path(args.out))


if __name__ == "__main__":
  main()
