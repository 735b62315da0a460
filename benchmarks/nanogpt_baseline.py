"""nanoGPT baseline: karpathy/nanoGPT's GPT trained byte-level with its shakespeare_char recipe for a wall-clock
budget, the baseline a jformer language model (configs/lm_demo.py) is compared against at equal wall clock.

    .venv/bin/pip install -e '.[bench]'  # torch, the only extra (2.13.0, a CPU build)
    .venv/bin/python benchmarks/nanogpt_baseline.py --data=DIR --minutes=10 --json=runs/nanogpt_baseline.json

DIR holds `{train,valid,test}.txt` or `.txt.gz` (UTF-8; jformer's "text" dataset, e.g.
jformer/data/corpora/english_text). The baseline reads no documents: it trains and evaluates on the raw bytes of
each file, blank lines between documents included. The vocabulary is the 256 byte values, so the cross-entropy in
nats / ln 2 is bits per byte directly. jformer's bits per byte divides by its documents' bytes, each document
followed by one "\\n" (`jformer.data.baselines.split_text_bytes`), which leaves out the extra "\\n" of each blank
line: on the bundled corpus the two counts differ by 12 of 184,314 valid bytes.

The model is nanoGPT's model.py (read from commit 3adf61e, written anew here) with the recipe's `bias = False`:
- a token embedding [256, n_embd] plus learned absolute positions [block_size, n_embd], dropout on their sum;
- n_layer pre-LayerNorm blocks, x + attn(ln_1(x)) then x + mlp(ln_2(x)); LayerNorm with a scale (and with
  `--bias` a shift), eps 1e-5;
- causal self-attention: one Linear(n_embd, 3 n_embd) for queries, keys and values, n_head heads,
  `F.scaled_dot_product_attention(is_causal=True)` with attention-weight dropout while training, then the output
  projection `c_proj` and dropout;
- MLP: Linear(n_embd, 4 n_embd), GELU (exact, erf), Linear(4 n_embd, n_embd) `c_proj`, dropout;
- a final LayerNorm, then `lm_head` Linear(n_embd, 256, no bias) whose weight is the token embedding (tied);
- init: every Linear weight and both embeddings normal(0, 0.02), biases 0, LayerNorms 1 and 0, then both `c_proj`
  weights of every block normal(0, 0.02 / sqrt(2 n_layer)); no Linear or LayerNorm has a bias (`--bias`: every
  one, as model.py's GPTConfig default);
- loss: mean cross-entropy over all [batch, block_size] positions.

Training is nanoGPT's train.py with config/train_shakespeare_char.py: AdamW (betas 0.9 and 0.99, eps 1e-8), weight
decay 0.1 on the parameters with >= 2 dimensions (Linear weights, the tied embedding, the position table) and none
on biases and LayerNorms; float32 (train.py uses no autocast on CPU); gradient norm clipped to 1.0; learning rate
`get_lr`: lr * (it + 1) / (warmup + 1) for update it < warmup (100), then cosine from lr (1e-3) to min_lr (lr / 10
= 1e-4) reached at the last update (`learning_rate`); dropout 0.2; each batch `batch` windows of block_size + 1
bytes at uniformly random offsets into the train bytes (`get_batch`), inputs the first block_size bytes and
targets the last. Width, depth, heads, rows and context come from the flags; the defaults are those of
configs/lm_demo.py (n_embd 256, 4 layers, 4 heads, 16 rows of 256 bytes), not shakespeare_char's (384, 6, 6, 64 x
256).

Where it differs from nanoGPT, and why:
- bytes (256), not shakespeare_char's 65 characters (its prepare.py): bits per byte compares across tokenizers.
- the number of updates comes from the wall-clock budget (below), and the cosine ends at the last one
  (lr_decay_iters = max_iters = the planned last update index, where shakespeare_char has 5000). A plan of fewer
  than 2 x warmup updates (a smoke test) shortens the warm-up to half the planned updates from the plan on.
- eager PyTorch, no torch.compile (train_shakespeare_char.py's advice for CPU: `compile = False`); the intra-op
  threads are `--threads`.
- evaluation: nanoGPT averages 200 random batches (`estimate_loss`); here the valid curve scores a fixed subset of
  `--eval_windows` windows, and the final valid and test figures score every byte of the split (below).
- seeds: torch.manual_seed(seed) for the init and dropout (nanoGPT: 1337), numpy's Generator(seed) for batches.
  The modules are built and initialised in model.py's order under its parameter names: for one seed the initial
  weights are model.py's GPT's, and so are the loss and gradients of a batch in train mode (checked against
  model.py at 3adf61e, with and without biases).

Budget (as jformer's `train.budget_minutes`, jformer/train/budget.py): `--minutes` of wall clock counted from the
end of the first update (its first-run costs are outside, as a compile is for jformer) to the end of the last
update's evaluation, periodic evaluations included; the init evaluation (step 0) and the final whole-split ones are
outside. The updates after the first SETTLE_STEPS (which run slower) are timed, evaluations taken out; after
MEASURE_STEPS of them `plan_steps` plans the total: the most updates whose estimated time (updates, the periodic
evaluations and the one after the last update) fits the budget left, less RESERVE_FRACTION of the budget. The plan
is made once more REPLAN_FRACTION of the way to its end, from the mean update time of the whole timed window (the
machine's speed drifts over minutes); that moves the end of the cosine, so the learning rate steps there by the
difference (a few percent of its range for a plan that moves by a few percent). `--steps=N` trains N updates
instead, with no plan.

Evaluation: valid bits per byte every `--eval_every` updates (default: about EVAL_POINTS times in the run), after
the last update and at init, on `--eval_windows` fixed windows spread evenly over the valid split, in eval mode (no
dropout): the curve of (step, seconds on the budget clock, valid_bpb). After training, the valid and test bits per
byte of the whole split: windows of block_size bytes tiling the split (`evaluation_windows`), each scored on all its
bytes, byte i predicted from the bytes of its window before it and the one byte before the window (the context
restarts at every window, so a window's first byte is predicted from one byte; the split's first byte from a "\\n"
standing for the file's start), summed over the windows and divided by the split's bytes.

Record (`--json=PATH`): {"benchmark": "nanogpt_baseline", "machine": {cpu, cpu_flags, cpus, torch, torch_threads,
python, date, commit, command}, "config": the flags, "results": {steps, train_seconds (the budget's clock),
valid_bpb, test_bpb, curve [{step, seconds, valid_bpb}], parameters (the tied embedding once), updates_per_second,
plan, busy_share_other (the share of the CPU time other processes took while training, `common.CpuMeter`), bytes
per split}}. Not under benchmarks/results/: tests/test_results_pages.py wants a docs/results page for every record
there and JAX's versions in its machine block.

The torch-free parts (reading the folder, the batches' windows, the evaluation windows, the learning-rate schedule
and the step planner) import without torch, for tests/test_nanogpt_baseline.py; torch is imported where the model
is built.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import sys
import time

import numpy as np

import common

VOCAB = 256  # byte values.
SPLITS = ("train", "valid", "test")
START_BYTE = ord("\n")  # the input before a split's first byte: a file's documents follow newlines.
SETTLE_STEPS = 10  # updates before the timed ones, the first included: the first updates run slower (jformer's too).
MEASURE_STEPS = 20  # updates timed before the first plan.
REPLAN_FRACTION = 0.7  # the final plan: this fraction of the way from the first plan to its end.
RESERVE_FRACTION = 0.02  # of the budget, left unplanned (jformer's budget holds back the same).
EVAL_POINTS = 8  # periodic valid evaluations in a run when --eval_every is 0.
EVAL_ROWS = 32  # windows per forward pass when evaluating.
LOG_POINTS = 20  # progress lines in a run (every steps // LOG_POINTS updates).


# ----------------------------------------------------------------------------------------------------------------
# Torch-free: data, schedule, plan.


def split_file(folder: str, split: str) -> str:
  """The file of `split` in `folder`: `<split>.txt` or `<split>.txt.gz`.

  Raises:
    ValueError: neither exists, or both do.
  """
  plain = os.path.join(folder, f"{split}.txt")
  found = [path for path in (plain, plain + ".gz") if os.path.isfile(path)]
  if len(found) == 2:
    raise ValueError(f"both {found[0]} and {found[1]} exist; keep only one of them.")
  if not found:
    raise ValueError(f"{folder} has no {split}.txt or {split}.txt.gz; give a folder with {{{','.join(SPLITS)}}}.txt "
                     "(optionally .gz), documents separated by blank lines.")
  return found[0]


def read_split(folder: str, split: str) -> bytes:
  """The raw bytes of `split`'s file (gunzipped when `.gz`), as they are: no decoding, nothing dropped."""
  path = split_file(folder, split)
  with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
    return f.read()


def read_splits(folder: str, block_size: int) -> dict[str, np.ndarray]:
  """{split: its bytes as uint8 [n]} for train, valid and test.

  Raises:
    ValueError: a file is missing, train has fewer than block_size + 2 bytes (no random window fits), or valid or
      test is empty.
  """
  data = {split: np.frombuffer(read_split(folder, split), dtype=np.uint8) for split in SPLITS}
  if len(data["train"]) < block_size + 2:
    raise ValueError(f"train has {len(data['train'])} bytes: a batch needs windows of block_size + 1 = "
                     f"{block_size + 1} bytes and more than one place to start them.")
  for split in ("valid", "test"):
    if not len(data[split]):
      raise ValueError(f"{split_file(folder, split)} is empty: there is nothing to evaluate.")
  return data


def sample_windows(data: np.ndarray, rng: np.random.Generator, rows: int, block_size: int) -> np.ndarray:
  """nanoGPT's get_batch: `rows` windows of block_size + 1 bytes of `data` [n] at offsets uniform in
  [0, n - block_size), as int64 [rows, block_size + 1]: inputs [:, :-1], targets [:, 1:]."""
  offsets = rng.integers(0, len(data) - block_size, size=rows)
  return data[offsets[:, None] + np.arange(block_size + 1)].astype(np.int64)


def evaluation_windows(data: np.ndarray, block_size: int) -> list[tuple[np.ndarray, np.ndarray]]:
  """The windows that score every byte of `data` [n] once: [(inputs, targets)], the full windows as two
  [n // block_size, block_size] arrays, then the rest (if any) as two [1, n % block_size]. Window k's targets are
  bytes k B .. k B + B - 1 and its inputs the bytes one before each (START_BYTE before byte 0): the targets of all
  windows, in order, are `data`."""
  shifted = np.concatenate([np.array([START_BYTE], np.uint8), data])  # shifted[i] = the byte before data[i].
  full = len(data) // block_size * block_size
  windows = []
  if full:
    windows.append((shifted[:full].reshape(-1, block_size), data[:full].reshape(-1, block_size)))
  if full < len(data):
    windows.append((shifted[full:len(data)][None], data[full:][None]))
  return windows


def curve_windows(data: np.ndarray, block_size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
  """(inputs, targets) [k, block_size] of the valid curve: `count` of `evaluation_windows`'s full windows, spread
  evenly from the first to the last (all of them when there are fewer; the rest window when there is none)."""
  inputs, targets = evaluation_windows(data, block_size)[0]
  chosen = np.unique(np.linspace(0, len(inputs) - 1, min(count, len(inputs))).round().astype(int))
  return inputs[chosen], targets[chosen]


def learning_rate(it: int, *, peak: float, minimum: float, warmup: int, last: int) -> float:
  """nanoGPT's get_lr at update `it` (0-based), with lr_decay_iters = `last` (the last update's index): linear
  warm-up peak * (it + 1) / (warmup + 1) for it < warmup, then cosine from `peak` at it = warmup to `minimum` at
  it = last, and `minimum` after."""
  if it < warmup:
    return peak * (it + 1) / (warmup + 1)
  if it >= last:
    return minimum
  ratio = (it - warmup) / (last - warmup)
  return minimum + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (peak - minimum)


def schedule_warmup(warmup: int, steps: int | None) -> int:
  """The warm-up of a run of `steps` updates (None: not planned yet): `warmup`, or half the run when that is
  shorter (module doc)."""
  return warmup if steps is None else min(warmup, steps // 2)


def default_eval_every(steps: int) -> int:
  """Updates between valid evaluations when --eval_every is 0: about EVAL_POINTS evaluations in `steps`."""
  return max(1, math.ceil(steps / EVAL_POINTS))


def evaluations(first_step: int, last_step: int, eval_every: int) -> int:
  """Valid evaluations after updates `first_step`..`last_step` (counts, 1-based): every multiple of `eval_every`,
  and after the last (once, if it is not a multiple). jformer's budget counts the same."""
  if last_step < first_step:
    return 0
  return last_step // eval_every - (first_step - 1) // eval_every + (last_step % eval_every != 0)


def plan_steps(*, budget_seconds: float, spent_seconds: float, done_steps: int, step_seconds: float,
               eval_seconds: float, eval_every: int | None) -> int:
  """The number of updates of a budgeted run: the largest S >= done_steps with

      spent_seconds + (S - done_steps) * step_seconds + evaluations(done_steps + 1, S, every) * eval_seconds
        <= budget_seconds

  given `done_steps` updates done in `spent_seconds`; `every` = `eval_every`, or `default_eval_every(S)` when None
  (the first plan, before the interval is fixed). S = done_steps when even one more does not fit.

  Raises:
    ValueError: a step time that is not positive.
  """
  if not step_seconds > 0:
    raise ValueError(f"step time must be positive, got {step_seconds}")
  left = budget_seconds - spent_seconds

  def cost(steps: int) -> float:
    every = eval_every or default_eval_every(steps)
    return (steps - done_steps) * step_seconds + evaluations(done_steps + 1, steps, every) * eval_seconds

  # The estimate without evaluations, then the exact cost decides.
  total = done_steps + max(math.floor(left / step_seconds), 0)
  while cost(total + 1) <= left:
    total += 1
  while total > done_steps and cost(total) > left:
    total -= 1
  return total


def replan_step(plan_step: int, steps: int) -> int:
  """The update after which the final plan is made: REPLAN_FRACTION of the way from the first plan (made after
  update `plan_step`, for `steps` updates) to its end; after `plan_step` in any case."""
  return plan_step + max(math.floor(REPLAN_FRACTION * (steps - plan_step)), 1)


def cpu_count() -> int:
  """The CPUs this process may use."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--data", required=True, help="folder of {train,valid,test}.txt[.gz]")
  parser.add_argument("--minutes", type=float, default=10.0, help="wall-clock training budget, counted from the end "
                      "of the first update (module doc)")
  parser.add_argument("--steps", type=int, default=0, help="train this many updates instead of a budget (0: plan "
                      "them from --minutes)")
  parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: the CPUs this process may "
                      "use)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--n_embd", type=int, default=256)
  parser.add_argument("--n_layer", type=int, default=4)
  parser.add_argument("--n_head", type=int, default=4)
  parser.add_argument("--batch", type=int, default=16, help="rows of block_size bytes per update")
  parser.add_argument("--block_size", type=int, default=256, help="context in bytes")
  parser.add_argument("--dropout", type=float, default=0.2)
  parser.add_argument("--bias", action=argparse.BooleanOptionalAction, default=False, help="biases in the Linears "
                      "and LayerNorms (model.py's GPTConfig default; off: train.py's and shakespeare_char's)")
  parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
  parser.add_argument("--min_lr", type=float, default=None, help="learning rate at the last update (default: lr / "
                      "10)")
  parser.add_argument("--warmup", type=int, default=100, help="linear warm-up updates")
  parser.add_argument("--weight_decay", type=float, default=0.1)
  parser.add_argument("--beta1", type=float, default=0.9)
  parser.add_argument("--beta2", type=float, default=0.99)
  parser.add_argument("--grad_clip", type=float, default=1.0, help="gradient norm clip (0: none)")
  parser.add_argument("--eval_every", type=int, default=0, help=f"updates between valid evaluations (0: about "
                      f"{EVAL_POINTS} in the run)")
  parser.add_argument("--eval_windows", type=int, default=64, help="valid windows the curve scores")
  parser.add_argument("--json", default="", help="write the record here ('' = do not)")
  args = parser.parse_args(argv)
  if args.n_embd % args.n_head:
    parser.error(f"--n_embd={args.n_embd} is not a multiple of --n_head={args.n_head}")
  if args.minutes <= 0 and args.steps <= 0:
    parser.error("give --minutes > 0 or --steps > 0")
  if min(args.n_embd, args.n_layer, args.n_head, args.batch, args.block_size, args.eval_windows) < 1:
    parser.error("--n_embd, --n_layer, --n_head, --batch, --block_size and --eval_windows must be >= 1")
  if args.steps < 0 or args.eval_every < 0 or args.warmup < 0:
    parser.error("--steps, --eval_every and --warmup must be >= 0")
  args.min_lr = args.lr / 10 if args.min_lr is None else args.min_lr
  args.threads = args.threads or cpu_count()
  return args


def machine(argv: list[str] | None, torch_version: str, threads: int) -> dict:
  """The machine, software and commit the figures come from, without JAX (`jformer.provenance`'s CPU model, SIMD
  flags and commit; `common.command_line`), with torch's version and intra-op threads."""
  import datetime
  import platform

  try:
    from jformer import provenance, runtime
  except ImportError:  # torch's environment without jformer installed: the checkout this script is in.
    sys.path.insert(0, str(common.REPO))
    from jformer import provenance, runtime

  flags = sorted(flag for flag in runtime.cpu_flags() if flag.startswith(provenance.SIMD_FLAGS))
  return {"cpu": provenance.cpu_model(), "cpu_flags": " ".join(flags), "cpus": cpu_count(), "torch": torch_version,
          "torch_threads": threads, "python": platform.python_version(),
          "date": datetime.datetime.now().isoformat(timespec="seconds"),
          "commit": provenance.git_commit(common.REPO, exclude=("benchmarks/results",)),
          "command": common.command_line(argv)}


# ----------------------------------------------------------------------------------------------------------------
# Torch: the model, evaluation, the training loop.


def import_torch():
  try:
    import torch
  except ImportError as e:
    raise SystemExit("benchmarks/nanogpt_baseline.py needs torch: .venv/bin/pip install -e '.[bench]' (or "
                     f"torch==2.13.0, a CPU build): {e}")
  return torch


def gpt(n_embd: int, n_layer: int, n_head: int, block_size: int, dropout: float, bias: bool):
  """nanoGPT's GPT over bytes (module doc), initialised from torch's current seed: `model(idx)` maps byte ids
  [batch, length <= block_size] to logits [batch, length, 256]."""
  torch = import_torch()
  nn, F = torch.nn, torch.nn.functional

  class CausalSelfAttention(nn.Module):

    def __init__(self):
      super().__init__()
      self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)  # queries, keys and values of all heads.
      self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
      self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
      """[batch, length, n_embd] -> the same."""
      b, t, d = x.shape
      q, k, v = (y.view(b, t, n_head, d // n_head).transpose(1, 2) for y in self.c_attn(x).split(d, dim=2))
      y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout if self.training else 0.0, is_causal=True)
      return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, d)))  # heads [b, H, t, d/H] joined.

  class MLP(nn.Module):

    def __init__(self):
      super().__init__()
      self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
      self.gelu = nn.GELU()
      self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
      self.dropout = nn.Dropout(dropout)

    def forward(self, x):
      return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

  class Block(nn.Module):

    def __init__(self):
      super().__init__()
      self.ln_1 = nn.LayerNorm(n_embd, bias=bias)
      self.attn = CausalSelfAttention()
      self.ln_2 = nn.LayerNorm(n_embd, bias=bias)
      self.mlp = MLP()

    def forward(self, x):
      x = x + self.attn(self.ln_1(x))
      return x + self.mlp(self.ln_2(x))

  class GPT(nn.Module):

    def __init__(self):
      super().__init__()
      self.transformer = nn.ModuleDict(dict(
          wte=nn.Embedding(VOCAB, n_embd), wpe=nn.Embedding(block_size, n_embd), drop=nn.Dropout(dropout),
          h=nn.ModuleList([Block() for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd, bias=bias)))
      self.lm_head = nn.Linear(n_embd, VOCAB, bias=False)
      self.transformer.wte.weight = self.lm_head.weight  # tied: one [256, n_embd] parameter.
      self.apply(self._init)  # in nanoGPT's order: the same seed gives its initial weights.
      for name, parameter in self.named_parameters():
        if name.endswith("c_proj.weight"):  # the residual projections (GPT-2's scaled init).
          nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(module):
      if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
      if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)

    def forward(self, idx):
      positions = torch.arange(idx.shape[1], device=idx.device)
      x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(positions))
      for block in self.transformer.h:
        x = block(x)
      return self.lm_head(self.transformer.ln_f(x))

  return GPT()


def optimizer(model, args):
  """nanoGPT's configure_optimizers: AdamW, weight decay on the parameters with >= 2 dimensions only."""
  torch = import_torch()
  parameters = list(model.parameters())  # the tied embedding once.
  groups = [{"params": [p for p in parameters if p.dim() >= 2], "weight_decay": args.weight_decay},
            {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0}]
  return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2))


def nats(model, inputs: np.ndarray, targets: np.ndarray) -> float:
  """Summed cross-entropy (nats) of `targets` [rows, length] given `inputs` [rows, length], EVAL_ROWS rows per
  forward pass, in eval mode without gradients (the model is put back in train mode)."""
  torch = import_torch()
  model.eval()
  total = 0.0
  with torch.no_grad():
    for begin in range(0, len(inputs), EVAL_ROWS):
      x = torch.from_numpy(inputs[begin:begin + EVAL_ROWS].astype(np.int64))
      y = torch.from_numpy(targets[begin:begin + EVAL_ROWS].astype(np.int64))
      logits = model(x)
      total += torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), reduction="sum").item()
  model.train()
  return total


def bits_per_byte(model, windows: list[tuple[np.ndarray, np.ndarray]]) -> float:
  """Bits per byte of the targets of `windows` ([(inputs, targets)], e.g. `evaluation_windows`), weighted by
  bytes."""
  count = sum(targets.size for _, targets in windows)
  return sum(nats(model, inputs, targets) for inputs, targets in windows) / count / math.log(2)


def train(args, data: dict[str, np.ndarray]) -> dict:
  """Trains and evaluates (module doc); returns the results of the record."""
  torch = import_torch()
  F = torch.nn.functional
  torch.manual_seed(args.seed)
  model = gpt(args.n_embd, args.n_layer, args.n_head, args.block_size, args.dropout, args.bias).train()
  opt = optimizer(model, args)
  parameters = sum(p.numel() for p in model.parameters())
  print(f"parameters: {parameters:,} ({parameters - model.transformer.wpe.weight.numel():,} without the position "
        "table, nanoGPT's count)", flush=True)
  rng = np.random.default_rng(args.seed)
  curve_inputs, curve_targets = curve_windows(data["valid"], args.block_size, args.eval_windows)
  curve_windows_ = [(curve_inputs, curve_targets)]

  begin = time.perf_counter()
  curve = [{"step": 0, "seconds": 0.0, "valid_bpb": bits_per_byte(model, curve_windows_)}]
  eval_seconds = time.perf_counter() - begin  # until a periodic evaluation has been timed.
  print(f"step 0: valid {curve[0]['valid_bpb']:.4f} bits per byte (the curve's {curve_inputs.size:,} bytes: "
        f"{len(curve_inputs)} x {curve_inputs.shape[1]}; {eval_seconds:.2f}s)", flush=True)

  steps = args.steps or None  # with a budget: planned after SETTLE_STEPS + MEASURE_STEPS updates.
  budget = None if args.steps else args.minutes * 60 * (1 - RESERVE_FRACTION)
  eval_every = args.eval_every or (default_eval_every(steps) if steps else None)
  warmup, log_every = schedule_warmup(args.warmup, steps), max(1, (steps or 0) // LOG_POINTS)
  plan = {}
  clock = window_start = first_step_seconds = None  # the budget's clock; the timed window's start.
  meter = common.CpuMeter()  # the share of the machine's CPU time other processes take while this one trains.
  eval_spent = window_evals = 0.0  # seconds of the periodic evaluations on the clock; of those before the window.
  evals_timed, losses, done = [], [], 0
  while steps is None or done < steps:
    lr = learning_rate(done, peak=args.lr, minimum=args.min_lr, warmup=warmup, last=steps - 1 if steps else math.inf)
    for group in opt.param_groups:
      group["lr"] = lr
    windows = torch.from_numpy(sample_windows(data["train"], rng, args.batch, args.block_size))
    x, y = windows[:, :-1], windows[:, 1:]  # [batch, block_size] each.
    started = time.perf_counter()
    loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
    loss.backward()
    if args.grad_clip:
      torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())
    done += 1
    now = time.perf_counter()
    if clock is None:  # the first update: its first-run costs are off the clock.
      clock, first_step_seconds, logged_at, logged_step = now, now - started, now, done
      meter.start()
    if done == SETTLE_STEPS:
      window_start, window_evals = now, eval_spent
    step_seconds = None  # mean seconds per update over the timed window, evaluations out.
    if done > SETTLE_STEPS:
      step_seconds = (now - window_start - (eval_spent - window_evals)) / (done - SETTLE_STEPS)

    if budget is not None and done == SETTLE_STEPS + MEASURE_STEPS:  # the first plan.
      steps = plan_steps(budget_seconds=budget, spent_seconds=now - clock, done_steps=done,
                         step_seconds=step_seconds, eval_seconds=eval_seconds, eval_every=args.eval_every or None)
      eval_every = args.eval_every or default_eval_every(steps)
      warmup, log_every = schedule_warmup(args.warmup, steps), max(1, steps // LOG_POINTS)
      plan = {"first_planned_steps": steps, "planned_at_step": done, "first_plan_step_seconds": step_seconds,
              "replan_at_step": replan_step(done, steps)}
      print(f"plan: {step_seconds:.4f}s per update (mean of updates {SETTLE_STEPS + 1}-{done}), {eval_seconds:.2f}s "
            f"per evaluation (every {eval_every} updates and after the last) -> {steps} updates for "
            f"--minutes={args.minutes:g} (warm-up {warmup}; planned again after update {plan['replan_at_step']})",
            flush=True)
    elif plan and done == plan["replan_at_step"] and done < steps:  # the final plan, from most of the run.
      eval_seconds = sum(evals_timed) / len(evals_timed) if evals_timed else eval_seconds
      first = steps
      steps = max(plan_steps(budget_seconds=budget, spent_seconds=now - clock, done_steps=done,
                             step_seconds=step_seconds, eval_seconds=eval_seconds, eval_every=eval_every), done + 1)
      warmup = schedule_warmup(args.warmup, steps)
      plan.update(planned_steps=steps, replanned_at_step=done, step_seconds=step_seconds, eval_seconds=eval_seconds)
      print(f"plan: again after update {done}: {step_seconds:.4f}s per update (mean of updates {SETTLE_STEPS + 1}-"
            f"{done}) -> {steps} updates (first plan {first})", flush=True)

    if steps is not None and (done % log_every == 0 or done == steps):
      rate = (done - logged_step) / (now - logged_at) if done > logged_step else 1 / first_step_seconds
      left = ((steps - done) * (step_seconds or 1 / rate)
              + evaluations(done + 1, steps, eval_every) * eval_seconds)
      loss = sum(losses) / len(losses)
      print(f"step {done}/{steps}: loss {loss:.4f} ({loss / math.log(2):.3f} bits per byte, mean of {len(losses)} "
            f"updates), {rate:.2f} updates/s, lr {lr:.2e}, {now - clock:.0f}s, ETA {left:.0f}s", flush=True)
      logged_at, logged_step, losses = now, done, []
    if eval_every and (done % eval_every == 0 or done == steps):
      started = time.perf_counter()
      valid = bits_per_byte(model, curve_windows_)
      elapsed = time.perf_counter() - started
      eval_spent += elapsed
      evals_timed.append(elapsed)
      logged_at += elapsed  # updates/s counts the updates alone.
      curve.append({"step": done, "seconds": round(started - clock, 2), "valid_bpb": valid})
      print(f"step {done}: valid {valid:.4f} bits per byte ({elapsed:.2f}s)", flush=True)
  train_seconds, busy_other = time.perf_counter() - clock, meter.stop()
  other = "" if busy_other is None else f"; other processes took {100 * busy_other:.0f}% of the CPU time meanwhile"
  print(f"trained {done} updates in {train_seconds:.1f}s ({(done - 1) / max(train_seconds - eval_spent, 1e-9):.2f} "
        f"updates/s after the first, evaluations out{other}); scoring all of valid and test", flush=True)
  final = {split: bits_per_byte(model, evaluation_windows(data[split], args.block_size)) for split in ("valid", "test")}
  print(f"valid {final['valid']:.4f}, test {final['test']:.4f} bits per byte (every byte of the split)", flush=True)
  if plan:
    plan.setdefault("planned_steps", steps)
  return {"steps": done, "train_seconds": round(train_seconds, 2), "valid_bpb": final["valid"],
          "test_bpb": final["test"], "curve": curve, "parameters": parameters,
          "first_step_seconds": round(first_step_seconds, 3), "eval_seconds_on_clock": round(eval_spent, 2),
          "updates_per_second": round((done - 1) / max(train_seconds - eval_spent, 1e-9), 3), "plan": plan,
          "busy_share_other": None if busy_other is None else round(busy_other, 3),
          "bytes": {split: len(data[split]) for split in SPLITS}}


def config_record(args) -> dict:
  """The run's settings, for the record."""
  keys = ("data", "minutes", "steps", "seed", "n_embd", "n_layer", "n_head", "batch", "block_size", "dropout", "bias",
          "lr", "min_lr", "warmup", "weight_decay", "beta1", "beta2", "grad_clip", "eval_every", "eval_windows")
  return {"vocab": VOCAB, **{key: getattr(args, key) for key in keys}}


def main(argv=None) -> dict:
  args = parse_args(argv)
  torch = import_torch()
  torch.set_num_threads(args.threads)
  info = machine(None if argv is None else [__file__, *argv], torch.__version__, torch.get_num_threads())
  print(f"{info['cpu']} ({info['cpu_flags'] or 'flags unknown'}), {info['cpus']} CPUs, torch {info['torch']}, "
        f"{info['torch_threads']} threads; commit {info['commit']}", flush=True)
  data = read_splits(args.data, args.block_size)
  print(f"data {args.data}: " + ", ".join(f"{split} {len(data[split]):,} bytes" for split in SPLITS), flush=True)
  results = train(args, data)
  record = {"benchmark": "nanogpt_baseline", "machine": info, "config": config_record(args), "results": results}
  common.write_json(args.json, record)
  return record


if __name__ == "__main__":
  main()
