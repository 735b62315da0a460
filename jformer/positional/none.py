"""`none`: no positional information (a baseline): the encoder is then permutation-equivariant, and the decoder
sees order only through its causal mask."""

from jformer.positional.registry import register


@register("none", acts="none")
def none():
  """No positional information: the encoder is permutation-equivariant (a baseline)."""
