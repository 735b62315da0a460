"""jformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in functional JAX/Flax.

Layers, top to bottom, each importing only the ones below it (the contract: `[tool.importlinter]` in pyproject.toml,
checked by tests/test_layers.py):
  main, then visualize                     the `jformer` command and its attention-map tool
  train/                                   state, steps, mesh/pmap runners, the train-and-evaluate loop
  decode/, data/, checkpoint/, parallel/, config   independent of each other
  models/                                  Flax Linen modules built from a frozen TransformerConfig
  attention/, positional/                  registries of attention variants and positional encodings
                                           (name -> pure function, its parameters declared)
  ops/                                     pure jax.numpy functions (attention, masks, positional encodings,
                                           losses) and the special token ids
  registry, runtime, paths, text           nothing of jformer: the plug-in Registry; process settings; a run's
                                           files through etils.epath (local folders and gs:// alike); UTF-8
                                           lines with errors naming the line
"""

__version__ = "0.1.0"
