"""Pure jax.numpy building blocks: no Flax, no state, nothing else of jformer imported."""
