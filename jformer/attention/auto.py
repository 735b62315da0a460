"""`auto` (the default): picks the attention kernel per backend, dtype and shape, says which once, then calls it.

For each call, in order:
- attention dropout requested: `dot_product` (the one variant that drops attention weights);
- the backend's library kernels, highest `auto_priority` first (each declares its platforms and priority when it
  registers: GPU `cudnn` then `pallas_gpu`, TPU `splash`; `registry.kernels`). The first that can express the
  call runs (`AttentionVariant.refusal`: the features it declares, and its `limits` on shapes and dtypes). The
  structure of the mask is data the kernels take: causal masking and a sliding window by index (`local`) go to
  splash as its `CausalMask`/`LocalMask` and to cuDNN as `is_causal`/`local_window_size` (a window with causal
  masking only), segment ids to both, a logit soft-cap to splash. A bias, a mask, or masking by explicit
  positions (decode steps; the model's packed training rows come without them,
  `jformer.models.layers.MultiHeadAttention`) is expressed by none of them;
- otherwise: `chunked` when query length x key length >= `BLOCKWISE_MIN_PAIRS` (512 x 512), memory linear in
  the length and no slower than dense there on CPU (`benchmarks/attention.py`, docs/results/), and skipping the
  blocks the causal mask or a window leaves empty; else
  `dot_product`, the dense reference, fastest for short sequences and decode.
Positions act only with causal masking or a window, so other calls' positions are dropped before choosing (exact).
`cudnn` takes segment ids only as right padding (one example per row), which is a property of the batch, not of
its shapes: with segment ids `auto` runs `lax.cond(cudnn.padding_lengths(...) expressible, cudnn, next)`, the
next being what it would pick without `cudnn`.

The choice is made while tracing, from static shapes, dtypes and which arguments are given, so it costs nothing at
run time (but for that one predicate). Each distinct choice is logged once per process (absl, INFO: `jformer ...
--verbosity=info` shows it on the console), one line
naming the kernel and why each kernel before it could not serve; nothing falls back silently.
"""

from __future__ import annotations

import dataclasses

import jax
from absl import logging
from jax import lax

from jformer.attention import chunked, context_parallel, cudnn, dot_product
from jformer.attention.registry import AttentionVariant, get, kernels, register, requested_features, softmax_weights

BLOCKWISE_MIN_PAIRS = 512 * 512
# The generic fallbacks, resolved once.
_CHUNKED, _DENSE = chunked.VARIANT, dot_product.VARIANT
_LOGGED: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Choice:
  """What `auto` runs for one call.

  Attributes:
    variant: the variant that runs it.
    refused: (kernel, reason) for each library kernel of the backend tried before it.
    otherwise: for `cudnn` with segment ids: the choice for batches that are not right padding; else None.
  """
  variant: AttentionVariant
  refused: tuple[tuple[str, str], ...] = ()
  otherwise: Choice | None = None

  @property
  def kernel(self) -> str:
    """The name of the variant that runs."""
    return self.variant.name

  def describe(self) -> str:
    """One line: the kernel, the runtime alternative, and why each refused kernel could not serve."""
    text = self.kernel
    if self.otherwise is not None:
      text += f" (batches that are not one example per row then padding: {self.otherwise.describe()})"
    return text + "".join(f"; not {name}: {reason}" for name, reason in self.refused)


def choose(query, key, value=None, *, backend: str | None = None, **masking) -> Choice:
  """The kernel `auto` runs for query `[B, T, H, D]`, key `[B, S, K, D]`, value (default: shaped like key) and
  the masking arguments of the signature on `backend` (default: JAX's). Arrays or `jax.ShapeDtypeStruct`s."""
  return _choose(query, key, key if value is None else value, backend or jax.default_backend(),
                 _relevant(masking), skip=())


@register("auto", supports={"causal", "segment_ids", "positions", "mask", "bias", "dropout", "decode", "gqa",
                            "softcap", "window"}, weights=softmax_weights, splits_sequence=True)
def auto(query, key, value, *, causal=False, q_segment_ids=None, kv_segment_ids=None, q_positions=None,
         kv_positions=None, mask=None, bias=None, dropout_rate=0.0, dropout_rng=None, logits_softcap=0.0, window=None,
         mesh=None):
  """The fastest that can run each call: library kernels by priority (GPU, TPU), else chunked (long) or dot_product.

  `mesh`: passed to the kernel that runs (module doc). When it splits the tokens (`context_parallel`), a causal or
  windowed call skips the kernels that can take no share of it (masking by index, not running the split itself).
  """
  masking = _relevant(dict(causal=causal, q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids,
                           q_positions=q_positions, kv_positions=kv_positions, mask=mask, bias=bias,
                           dropout_rate=dropout_rate, dropout_rng=dropout_rng, logits_softcap=logits_softcap,
                           window=window))
  backend = _backend()
  skip = ()
  if (causal or window is not None) and context_parallel.split(mesh, query, key, causal=causal) is not None:
    skip = tuple(k.name for k in kernels(backend) if not k.splits_sequence and "positions" not in k.supports)
  choice = _choose(query, key, value, backend, masking, skip=skip)
  if skip:
    choice = dataclasses.replace(choice, refused=tuple(
        (name, "masks by index: cannot take a share of the split sequence") for name in skip) + choice.refused)
  message = (f"attention 'auto' on {backend}, {query.dtype}, T={query.shape[1]} S={key.shape[1]} "
             f"H={query.shape[2]} K={key.shape[2]} D={query.shape[3]}, "
             f"{'+'.join(sorted(requested_features(**masking))) or 'no masking'}: {choice.describe()}")
  log_once(message)
  return _run(choice, query, key, value, masking, mesh)


def log_once(message: str) -> None:
  """Logs `message` (absl, INFO) the first time this process sees it: each distinct choice of a kernel, one line."""
  if message not in _LOGGED:
    _LOGGED.add(message)
    logging.info(message)


def _backend() -> str:
  """JAX's backend (a function of its own, so a test can pretend to be on another one)."""
  return jax.default_backend()


def backend() -> str:
  """The backend `auto` chooses for (JAX's, or the one a test pretends to be on)."""
  return _backend()


def _run(choice: Choice, query, key, value, masking, mesh):
  run = lambda variant: variant.fn(query, key, value, **masking, mesh=mesh)
  if choice.otherwise is None:
    return run(choice.variant)
  batch = query.shape[0]
  ids = [jax.numpy.broadcast_to(masking[n], (batch, x.shape[1]))
         for n, x in (("q_segment_ids", query), ("kv_segment_ids", key))]
  _, _, expressible = cudnn.padding_lengths(*ids)
  return lax.cond(expressible, lambda: run(choice.variant),
                  lambda: _run(choice.otherwise, query, key, value, masking, mesh))


def _choose(query, key, value, backend: str, masking, skip: tuple[str, ...]) -> Choice:
  if masking.get("dropout_rate", 0.0) > 0.0:
    return Choice(_DENSE)
  refused = []
  for kernel in kernels(backend):
    if kernel.name in skip:
      continue
    reason = kernel.refusal(query, key, value, **masking)
    if reason is not None:
      refused.append((kernel.name, reason))
      continue
    otherwise = None
    if kernel.name == "cudnn" and masking.get("q_segment_ids") is not None:
      otherwise = _choose(query, key, value, backend, masking, skip=skip + (kernel.name,))
    return Choice(kernel, tuple(refused), otherwise)
  generic = _CHUNKED if query.shape[1] * key.shape[1] >= BLOCKWISE_MIN_PAIRS else _DENSE
  return Choice(generic, tuple(refused))


def _relevant(masking: dict) -> dict:
  """The masking arguments without positions when neither causal nor windowed (they act only then)."""
  if masking.get("causal") or masking.get("window") is not None:
    return dict(masking)
  return {k: v for k, v in masking.items() if k not in ("q_positions", "kv_positions")}



VARIANT = get("auto")  # the registered entry, for variants that run through `auto` (`local`).
