"""The special token ids, defined once for every layer: the vocabulary (`data`), masks (`ops.masks`), the
decoders (`decode`) and the tools that read their output all import them from here.

They live in `ops`, the lowest layer that needs one (padding masks), so every layer above may import them and
`ops` still imports nothing outside itself. The SentencePiece vocabulary has no BOS piece: the decoder's start
token is the padding id, as `models.transformer.shift_right` feeds it.
"""

PAD_ID = 0  # padding; also the decoder's start token (BOS_ID).
BOS_ID = PAD_ID
EOS_ID = 1  # ends every source and target sequence.
UNK_ID = 2  # pieces the vocabulary lacks.
