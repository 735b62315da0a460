"""Pretrained models in and out: Hugging Face checkpoints of the Llama family (Llama 1-3.x, Mistral, Qwen2, Qwen3;
rope scalings as `rope`), Gemma 2, GPT-2 and Marian imported as a jformer run (`import_hf`) and written back
(`export_hf`), through one mapping table per family read both ways (`tables`, `family`). Only the command line
imports this package."""

from jformer.interop import gemma2  # noqa: F401 (its family registers; hf.py imports the others)
from jformer.interop.hf import convert, export_hf, import_hf, to_pretrained_tensors

__all__ = ["convert", "export_hf", "import_hf", "to_pretrained_tensors"]
