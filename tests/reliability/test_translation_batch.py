"""A sentence's translation does not depend on what it is batched with, bfloat16 beam search included.

At one shape a row's numbers do not depend on the other rows; across shapes they do (a longer padded source or
decoding cache sums over more slots, in another order), which flipped near-tied beams when a sentence's padding
came from its longest batch-mate. So the Translator decodes every sentence in the shapes of its own length bucket:
checked here on the shapes themselves, and on the outputs."""

import pathlib

import jax
import numpy as np
import pytest

from jformer import config as config_lib
from jformer import tasks
from jformer.decode.translator import Translator
from jformer.ops.tokens import EOS_ID, PAD_ID

REPO = pathlib.Path(__file__).resolve().parents[2]
VOCAB = 64


class CharTokenizer:
  """Characters to ids 3..VOCAB-1, then EOS; decoding writes the ids up to EOS as numbers."""
  vocab_size = VOCAB

  def encode(self, text: str) -> list[int]:
    return [3 + ord(c) % (VOCAB - 3) for c in text] + [EOS_ID]

  def decode(self, ids) -> str:
    ids = list(ids)
    ids = ids[:ids.index(EOS_ID)] if EOS_ID in ids else ids
    return " ".join(str(i) for i in ids if i != PAD_ID)


@pytest.mark.integration  # trains or decodes a model for seconds: the integration tier.
def test_bfloat16_beam_translations_do_not_depend_on_their_batch():
  config = config_lib.load(REPO / "configs" / "small.py", {
      "model.vocab_size": VOCAB, "model.d_model": 32, "model.num_heads": 2, "model.d_ff": 64,
      "model.num_encoder_layers": 1, "model.num_decoder_layers": 1, "model.max_length": 64,
      "model.dropout_rate": 0.0, "model.dtype": "bfloat16"})
  model = tasks.build_model(config)
  tokens = np.ones((1, 8), np.int32)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), *model.call_arguments({"inputs": tokens, "targets": tokens})[0])
  params = jax.tree.map(lambda x: 4.0 * x, params["params"])  # outputs that depend on the source (module doc of
  # tests/test_decode_distributed.py): random weights give many near ties, the hard case.
  rng = np.random.default_rng(0)
  text = "the quick brown fox jumps over the lazy dog and keeps running far away"
  sentences = [text[start:start + int(length)] for start, length in
               zip(rng.integers(0, 20, 48), rng.integers(2, 44, 48))]
  translator = Translator(model, params, CharTokenizer(), batch_size=8, length_bucket=8, max_extra_length=6,
                          devices=jax.devices()[:1], method="beam", beam_size=4)
  shapes = {}  # sentence -> the (rows, source length, decode length) it was decoded with, per call.
  decode, call = translator._decode, []

  def recording(shared, rows, *, max_decode_len):
    inputs, indices = (np.asarray(x) for x in rows)
    for row in np.flatnonzero(inputs.any(axis=1)):
      shapes.setdefault(call[-1][indices[row]], set()).add((*inputs.shape, max_decode_len))
    return decode(shared, rows, max_decode_len=max_decode_len)

  translator._decode = recording

  def translate(batch):
    call.append(batch)
    return translator(batch)

  together = translate(sentences)
  assert len(set(together)) >= 30  # real, varied outputs.
  alone = [translate([sentence])[0] for sentence in sentences[:16]]
  assert all(len(decoded_with) == 1 for decoded_with in shapes.values()), shapes
  assert alone == together[:16]
  order = rng.permutation(len(sentences))
  shuffled = translate([sentences[i] for i in order])
  assert [shuffled[k] for k in np.argsort(order)] == together
