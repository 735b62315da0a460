"""A small decoder-only language model on the bundled English text, trained for 10 minutes of wall clock on 2 CPU
cores (`train.budget_minutes`: the steps are planned from the measured step time; the last fifth cools the
learning rate down linearly to 0).

    jformer train --config=configs/lm_demo.py --workdir=runs/lm
    jformer evaluate --workdir=runs/lm --split=test --config.data.max_length=1024

Reports bits per byte of the valid split with the `xz -9` baseline beside it, and test bits per byte at contexts
256, 512 and 1024 (trained at 256: `train.eval_lengths` measures length extrapolation). d_model 256, 4 layers,
a SentencePiece vocabulary (8k on the bundled text, by the rule below), rows of 256 tokens packed from whole
documents (no attention across documents); model.max_length 1024 so that every positional encoding, learned tables
included, covers the longer contexts.

The block is the "modern" one (pre-RMSNorm, SwiGLU, rotary positions, QK-norm, z-loss, no biases): the block
ablation at equal wall clock (configs/sweeps/lm_blocks.py, docs/results/sweeps.md) gave it 1.747 valid bits per
byte over 2 seeds against 1.821 for pre-LayerNorm and 2.260 for the paper's post-norm block, which stalled.

Your own text: `--config.data.path=DIR` ({train,valid,test}.txt[.gz], documents separated by blank lines). The
vocabulary and dropout are chosen at start-up by rules (`train.recipe`, jformer/config/recipe.py; printed with the
measured corpus and the estimated steps; a key given on the command line keeps its value), as configs/demo.py does
for translation:
- vocabulary from the estimated tokens of the train split: a small text sees each piece of a large vocabulary too
  rarely to learn it, and a smaller output layer makes a step cheaper.
- dropout from the estimated passes over those tokens: none while the text is seen about once (dropout only slows
  learning then), more as the budget passes over a small text many times, where the valid loss would otherwise
  turn up before the end.
"""

from jformer.config import base_config


def get_config():
  config = base_config()
  model = config.model
  model.architecture = "lm"  # decoder-only: bits per byte, no BLEU.
  model.vocab_size = 8000  # SentencePiece vocabulary trained on the data (train.recipe chooses it, below).
  model.d_model = 256
  model.num_heads = 4
  model.d_ff = 683  # SwiGLU at 2/3 of 4 d_model: the feed-forward parameters of a plain d_ff of 1024.
  model.num_decoder_layers = 4
  model.norm = "pre"  # x + Sublayer(Norm(x)): post-norm (the paper's) at this learning rate stalls.
  model.normalization = "rmsnorm"
  model.activation = "swiglu"
  model.positional = "rotary"
  model.qk_norm = True
  model.z_loss = 1e-4
  model.use_bias = False
  model.max_length = 1024  # Position tables cover the evaluation contexts (train.eval_lengths).

  data = config.data
  data.dataset = "text"  # Documents separated by blank lines in {train,valid,test}.txt[.gz].
  data.path = ""  # The bundled English corpus (jformer/data/corpora/english_text).
  data.pack = "documents"  # Whole documents packed into rows (segment ids + positions).
  data.max_length = 256  # Training context.
  data.batch_size = 16  # 16 rows x 256 tokens per step.
  data.eval_batch_size = 16

  config.optimizer.warmup_steps = 200  # Peak lr = 256^-0.5 * 200^-0.5 = 4.4e-3 at step 200.
  config.optimizer.grad_clip_norm = 1.0  # A guard for the high peak learning rate.

  config.optimizer.cooldown_fraction = 0.2  # The last 20% of the planned steps: learning rate linearly to 0.

  train = config.train
  train.budget_minutes = 10.0  # Training steps planned from the measured step time (replaces train.steps).
  train.recipe = (  # model.vocab_size and model.dropout_rate from the corpus and the budget (above).
      ("model.vocab_size", "tokens", ((400_000, 2000), (1_200_000, 4000), (None, 8000))),
      ("model.dropout_rate", "passes", ((1.5, 0.0), (4, 0.1), (12, 0.2), (None, 0.3))),
  )
  train.log_every = 50
  train.eval_every = 100  # Valid bits per byte every 100 steps (evaluations count against the budget).
  train.keep_best = "valid_bits_per_byte"  # The final test uses the evaluation of the best valid bits per byte.
  train.checkpoint_every = 100
  train.eval_lengths = (256, 512, 1024)  # Final test bits per byte at these contexts.

  decode = config.decode  # `jformer generate`'s defaults: nucleus sampling (greedy and beam repeat themselves).
  decode.method = "sample"
  decode.temperature = 0.8
  decode.top_p = 0.95
  return config
