"""Decoding for jformer: beam search (the paper's, beam 4 and alpha 0.6), greedy search and sampling.

Every decoder drives a model step `tokens_to_logits(ids [N, 1], cache) -> (logits [N, vocab], new_cache)` inside a
`jax.lax.while_loop` (see `jformer.decode.common` for the convention), so all of them are jit-able with static
`batch_size`, `beam_size` and `max_decode_len`. Ids (`jformer.ops.tokens`): pad = BOS = 0, EOS = 1; outputs omit BOS
and hold 0 after EOS.

  beam_search(tokens_to_logits, cache, *, batch_size, beam_size=4, alpha=0.6, max_decode_len, eos_id=1,
              max_lengths=None) -> (sequences [B, beam, L], scores [B, beam])
  greedy_search(tokens_to_logits, cache, *, batch_size, max_decode_len, eos_id=1, max_lengths=None) -> [B, L]
  sample(tokens_to_logits, cache, rng, *, batch_size, max_decode_len, temperature=1.0, top_k=0, top_p=1.0,
         eos_id=1, max_lengths=None) -> [B, L]
  flat_batch_beam_expand(x, beam_size): [B, ...] -> [B * beam, ...], to expand what the model closes over

Every decoder takes `start_ids` (int `[B]`, default BOS): the token each row's first step feeds. A language model
continuing a prompt feeds the prompt's last token, the rest of the prompt being already in the cache (prefill,
`jformer.decode.generator`); `jformer.decode.search.search` picks a decoder by name (`config.decode.method`).

`jformer.decode.distributed.RowParallel` splits a batch's rows across every device of every process (the
`Translator` in `jformer.decode.translator` and the `Generator` in `jformer.decode.generator` decode that way);
sampling with one key per row keeps each row's sample independent of that split.
"""

from jformer.decode.beam_search import beam_search, length_penalty
from jformer.decode.common import NEG_INF, flat_batch_beam_expand
from jformer.decode.greedy import greedy_search
from jformer.decode.sampling import filter_logits, sample
from jformer.ops.tokens import BOS_ID, EOS_ID, PAD_ID

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "NEG_INF",
    "PAD_ID",
    "beam_search",
    "filter_logits",
    "flat_batch_beam_expand",
    "greedy_search",
    "length_penalty",
    "sample",
]
