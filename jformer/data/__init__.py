"""Data: shared SentencePiece vocabulary, dataset registry (tfds ArrayRecord sources) and grain pipelines.

Typical use (one host; with several processes, `prepare(config, workdir)` builds the data and the vocabulary once
and `make_datasets` reads and tokenizes only this host's shard):

    train_source = load_split("parallel_text", "train", path="", data_dir=f"{workdir}/tfds")
    tok = get_tokenizer(f"{workdir}/vocab/spm_8000.model", lambda: pair_texts(train_source), vocab_size=8000)
    data = make_datasets(dataset="parallel_text", path="", data_dir=f"{workdir}/tfds", tokenizer=tok,
                         batch_size=64, max_length=64, packing=True, seed=0)
    batch = next(data.train)            # dict of int32 [64, 64]: see `pipeline` for the six keys
    state = data.train.get_state()      # resume with data.train.set_state(state)

Token-budget batching (fairseq's --max-tokens; `buckets`): `make_datasets(..., packing=False, batch_tokens=4096,
row_multiple=jax.device_count())` gives training batches of at most 4096 source and 4096 target tokens per step, in
one of a few `[rows, length]` shapes (`data.batch_shapes`); `data.tokens_per_step` is their mean real tokens.

A training run reads the same from its config: `prepare(config, workdir)` (the tokenizer), `source_args(config,
workdir)`.

Language modelling reads a document dataset ("text", "lm1b", "wiki40b/en": `DocumentSource`s of `{"text": str}`):

    data = make_lm_datasets(dataset="text", path="", data_dir=f"{workdir}/tfds", tokenizer=tok, batch_size=64,
                            max_length=256, pack="documents")
    batch = next(data.train)            # dict of int32 [64, 256]: targets, targets_segmentation, targets_position
    for batch in data.eval_batches("valid", max_length=512): ...
    bits_per_byte = total_nats / math.log(2) / data.split_bytes("valid")

Several document datasets mixed by weight (`data.mixture`; `mixture`): `make_mixture_datasets(mixture_sources(
config), ...)` takes `make_lm_datasets`'s arguments; its `tokens_by_source()` and `sources` (each source's splits)
give per-source token counts and bits per byte.

The synthetic tasks ("mqar", "induction", "selective_copy", "listops") are generated rows, not text:

    data = make_synthetic_datasets(dataset="mqar", options={"seq_len": 64, "num_kv_pairs": 4}, batch_size=64)
    batch = next(data.train)            # dict of int32 [64, 64]: targets, ..., targets_weights (the answers)

Token ids (`jformer.ops.tokens`): pad = 0, eos = 1, unk = 2, no bos; source and target sequences end with EOS.
"""

from jformer.data.checks import check_run_inputs
from jformer.data.documents import DocumentSource
from jformer.data.lm_pipeline import (LM_BATCH_KEYS, PACKS, LMDatasets, TokenizedDocuments, lm_eval_dataset,
                                      lm_train_dataset, make_lm_datasets, tokenize_documents)
from jformer.data.pipeline import (BATCH_KEYS, LONG_EXAMPLES, Datasets, TokenizedPairs, eval_dataset, make_datasets,
                                   pad_example, tokenize_pairs, train_dataset)
from jformer.data.mixture import make_mixture_datasets, problems as mixture_problems, sources_of as mixture_sources
from jformer.data.preparation import prepare
from jformer.data.sources import (REGISTRY, SPLITS, TextPairSource, available_datasets, bundled_corpus_path,
                                  bundled_text_path, check_dataset_options, dataset_options, get_dataset, load_split,
                                  pair_texts, register_dataset, synthetic_entry, training_texts)
from jformer.data.synthetic_pipeline import SyntheticDatasets, make_synthetic_datasets
from jformer.data.tokenizer import Tokenizer, get_tokenizer, train_tokenizer
from jformer.data.workdir import load_tokenizer, source_args, vocab_path
from jformer.ops.tokens import EOS_ID, PAD_ID, UNK_ID

__all__ = [
    "BATCH_KEYS", "REGISTRY", "Datasets", "DocumentSource", "EOS_ID", "LMDatasets", "LM_BATCH_KEYS", "LONG_EXAMPLES",
    "PACKS", "PAD_ID", "SPLITS",
    "TextPairSource", "TokenizedDocuments", "TokenizedPairs", "Tokenizer", "UNK_ID", "available_datasets",
    "SyntheticDatasets", "bundled_corpus_path", "bundled_text_path", "check_dataset_options", "check_run_inputs",
    "dataset_options", "eval_dataset", "get_dataset", "get_tokenizer",
    "lm_eval_dataset", "lm_train_dataset", "load_split", "load_tokenizer", "make_datasets", "make_lm_datasets",
    "make_mixture_datasets", "mixture_problems", "mixture_sources",
    "make_synthetic_datasets", "pad_example", "pair_texts", "prepare", "register_dataset", "source_args",
    "synthetic_entry", "tokenize_documents",
    "tokenize_pairs", "train_dataset", "train_tokenizer", "training_texts", "vocab_path"
]
