"""The padding id out of the output softmax (`model.predicts_padding=False`): a pretrained vocabulary whose start
token is also its end token (GPT-2's and Qwen2's <|endoftext|>) gets a jformer id 0 of its own
(`jformer.data.pretrained_vocab`); its logit is set to `MASKED` (exp(MASKED - max) = 0 in float32) so that the
softmax over the other ids is the family's own distribution."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jformer.ops import logit_bias
from jformer.ops.tokens import PAD_ID

MASKED = -1e9  # as the decoders mask the padding logit: finite, so no inf - inf = NaN anywhere.


def mask_logit(logits_BxTxV: jax.Array) -> jax.Array:
  """`[..., V]` logits with the padding id's set to `MASKED`."""
  return logits_BxTxV.at[..., PAD_ID].set(MASKED)


def mask_row(hidden_BxTxD: jax.Array, table_VxD: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(hidden `[B, T, D + 1]`, table `[V, D + 1]`) whose product is `mask_logit(hidden table^T)`, for a loss that
  projects them itself (`jformer.ops.linear_cross_entropy`): a constant 1 feature, and a column that is `MASKED` on
  the padding row and 0 elsewhere (the masked logit is h.e_0 + MASKED, which is MASKED in float32): a logit bias
  (`jformer.ops.logit_bias`)."""
  return logit_bias.append_bias(hidden_BxTxD, table_VxD,
                                jnp.zeros(table_VxD.shape[0], table_VxD.dtype).at[PAD_ID].set(MASKED))
