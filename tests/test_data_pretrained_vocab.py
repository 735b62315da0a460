"""A pretrained vocabulary in jformer's ids (`jformer.data.pretrained_vocab`): the start token becomes 0 and the end
token 1, the rest keep their order; a start token that also ends gets an id of its own; text round-trips."""

import pickle

import numpy as np
import pytest

from jformer.data.pretrained_vocab import PretrainedTokenizer, VocabularyMap


def test_llama_layout_is_a_permutation_and_its_inverse():
  vocabulary = VocabularyMap(start_id=1, end_id=2, size=6)  # Llama: unk 0, <s> 1, </s> 2.
  np.testing.assert_array_equal(vocabulary.pretrained_ids, [1, 2, 0, 3, 4, 5])
  np.testing.assert_array_equal(vocabulary.jformer_ids, [2, 0, 1, 3, 4, 5])
  np.testing.assert_array_equal(vocabulary.to_pretrained(vocabulary.to_jformer(np.arange(6))), np.arange(6))
  assert vocabulary.vocab_size == 6


def test_a_start_token_that_also_ends_gets_a_second_id():
  vocabulary = VocabularyMap(start_id=5, end_id=5, size=6)  # GPT-2, Qwen2: <|endoftext|> both.
  assert vocabulary.vocab_size == 7
  np.testing.assert_array_equal(vocabulary.pretrained_ids, [5, 5, 0, 1, 2, 3, 4])
  assert vocabulary.to_jformer(5) == 1  # in text it ends: EOS.
  np.testing.assert_array_equal(vocabulary.to_pretrained(vocabulary.to_jformer(np.arange(6))), np.arange(6))
  with pytest.raises(ValueError, match="the pretrained end token id 9 is outside its vocabulary of 6 ids"):
    VocabularyMap(start_id=1, end_id=9, size=6)


def test_tokenizer_encodes_to_jformer_ids_with_eos_and_round_trips(tmp_path):
  from tokenizers import Tokenizer, models, pre_tokenizers

  vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "save": 3, "the": 4, "file": 5}
  tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
  tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
  path = tmp_path / "pretrained_vocab.json"
  PretrainedTokenizer.write(path, kind="tokenizers", tokenizer=tokenizer.to_str().encode(),
                            vocabulary=VocabularyMap(1, 2, 6))
  loaded = pickle.loads(pickle.dumps(PretrainedTokenizer.from_file(path)))
  assert loaded.encode("save the file") == [3, 4, 5, 1]  # pretrained 3, 4, 5 keep their ids; EOS (</s>) is 1.
  assert loaded.encode("save nothing") == [3, 2, 1]  # <unk> (pretrained 0) is jformer 2.
  assert loaded.decode([3, 4, 5, 1, 4]) == "save the file"  # up to EOS.
  assert loaded.vocab_size == 6
  (tmp_path / "bad.json").write_text("{}")
  with pytest.raises(ValueError, match="is not a pretrained vocabulary written by `jformer import-hf`"):
    PretrainedTokenizer.from_file(tmp_path / "bad.json")


def test_a_sentencepiece_tokenizer_model_serves_too(tmp_path):
  """A tokenizer.model (SentencePiece, as Llama 2's; here one jformer trains, whose id 1 ends and here also starts:
  jformer then has one id more)."""
  from jformer.data.tokenizer import train_tokenizer

  texts = ["save the file", "open the file", "close the window", "the file is saved"] * 20
  spm = train_tokenizer(texts, vocab_size=40, model_type="bpe")
  path = tmp_path / "pretrained_vocab.json"
  PretrainedTokenizer.write(path, kind="sentencepiece", tokenizer=spm.model_proto, vocabulary=VocabularyMap(1, 1, 40))
  tokenizer = PretrainedTokenizer.from_file(path)
  ids = tokenizer.encode("save the file")
  assert tokenizer.vocab_size == 41 and ids[-1] == 1 and 0 not in ids[:-1]
  assert tokenizer.decode(ids) == "save the file"
  np.testing.assert_array_equal(tokenizer.map.to_pretrained(ids[:-1]), spm.encode("save the file")[:-1])
