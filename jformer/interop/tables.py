"""A family's mapping table, read both ways: each row names pretrained tensors, the jformer parameters they become and
the transform between them, so import and export cannot drift apart.

Names: a pretrained tensor is named as in its safetensors file ("model.layers.0.self_attn.q_proj.weight"), a jformer
parameter by its path in the params tree joined by "/" ("decoder/layer_0/self_attention/query/kernel"); "{i}" in a
row stands for every layer index. Shapes: D d_model, H query heads, G key/value heads, K head_dim, F d_ff, V vocab.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Transform:
  """`to_jformer(*pretrained) -> tuple of jformer arrays` and its inverse `to_pretrained(*jformer) -> tuple`."""
  to_jformer: Callable[..., tuple]
  to_pretrained: Callable[..., tuple]


IDENTITY = Transform(lambda x: (x,), lambda x: (x,))
# torch.nn.Linear keeps `weight` as [out, in]; a jformer kernel is [in, out].
LINEAR = Transform(lambda w: (w.T,), lambda w: (w.T,))


def heads_in(heads: int, head_dim: int) -> Transform:
  """A Linear into heads, [H K, D] <-> kernel [D, H, K]."""
  return Transform(lambda w: (w.T.reshape(w.shape[1], heads, head_dim),),
                   lambda w: (w.reshape(w.shape[0], heads * head_dim).T,))


def heads_bias(heads: int, head_dim: int) -> Transform:
  """Its bias, [H K] <-> [H, K]."""
  return Transform(lambda b: (b.reshape(heads, head_dim),), lambda b: (b.reshape(heads * head_dim),))


def heads_out(heads: int, head_dim: int) -> Transform:
  """The output Linear from heads, [D, H K] <-> kernel [H, K, D]."""
  return Transform(lambda w: (w.T.reshape(heads, head_dim, w.shape[0]),),
                   lambda w: (w.reshape(heads * head_dim, w.shape[-1]).T,))


def vocab_rows(pretrained_ids: np.ndarray, jformer_ids: np.ndarray) -> Transform:
  """Rows in the pretrained vocabulary's order [V_pretrained, ...] <-> jformer's order [V, ...]
  (`jformer.data.pretrained_vocab.VocabularyMap`)."""
  return Transform(lambda w: (w[pretrained_ids],), lambda w: (w[jformer_ids],))


@dataclasses.dataclass(frozen=True)
class Row:
  """Pretrained tensor names <-> jformer parameter paths (each a name or a tuple of names), through `transform`."""
  pretrained: str | tuple[str, ...]
  jformer: str | tuple[str, ...]
  transform: Transform = IDENTITY

  def expanded(self, num_layers: int) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(pretrained names, jformer paths) of every layer the row stands for ("{i}" filled in), or the row itself."""
    pretrained, jformer = _names(self.pretrained), _names(self.jformer)
    if not any("{i}" in name for name in pretrained + jformer):
      return [(pretrained, jformer)]
    return [(tuple(n.format(i=i) for n in pretrained), tuple(n.format(i=i) for n in jformer))
            for i in range(num_layers)]


def _names(names: str | tuple[str, ...]) -> tuple[str, ...]:
  return (names,) if isinstance(names, str) else tuple(names)


def _pairs(rows: Sequence[Row], num_layers: int, *, to_jformer: bool):
  """(row, source names, target names) of every row and layer, read towards jformer or back."""
  for row in rows:
    for names, paths in row.expanded(num_layers):
      yield (row, names, paths) if to_jformer else (row, paths, names)


def _read(rows: Sequence[Row], arrays: Mapping[str, np.ndarray], num_layers: int, *, to_jformer: bool) -> set[str]:
  """The names of `arrays` the rows read, every one checked to be there (nothing is read): ValueError naming the
  missing ones."""
  used = {name for _, source, _ in _pairs(rows, num_layers, to_jformer=to_jformer) for name in source}
  missing = sorted(used - set(arrays))
  if missing:
    raise ValueError(f"the checkpoint lacks {_some(missing)} (its family's table reads them); is it complete?"
                     if to_jformer else f"the parameters lack {_some(missing)}, which the family's table writes")
  return used


def _some(names: list[str]) -> str:
  return f"{names[:8]}" + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def to_jformer(rows: Sequence[Row], tensors: Mapping[str, np.ndarray], num_layers: int, *,
               ignored: Sequence[str] = (), shapes: Mapping[str, tuple] | None = None) -> dict[str, np.ndarray]:
  """{jformer path: array} from the pretrained `tensors` (a mapping that may read each tensor when asked for: each
  is asked for once); every tensor must be read by a row or match an `ignored` pattern (buffers the model
  recomputes), else ValueError names the ones left over (and a row's missing tensor), before any is read. With the
  model's parameter `shapes` ({path: shape}), a tensor whose shape is not the one config.json describes is refused
  as it is read, named with both shapes."""
  used = _read(rows, tensors, num_layers, to_jformer=True)
  unread = sorted(name for name in set(tensors) - used if not any(re.fullmatch(p, name) for p in ignored))
  if unread:
    raise ValueError(f"the checkpoint holds tensors this family's table does not read: {_some(unread)}; a variant "
                     "jformer cannot represent yet (open an issue naming its architecture)")
  params = {}
  for row, source, target in _pairs(rows, num_layers, to_jformer=True):
    arrays = [np.asarray(tensors[name]) for name in source]
    said = ", ".join(f"{name} {list(array.shape)}" for name, array in zip(source, arrays))
    mismatch = f"the weights do not match config.json (download them again): the checkpoint's {said}"
    try:
      converted = row.transform.to_jformer(*arrays)
    except ValueError as e:
      raise ValueError(f"{mismatch} cannot become {', '.join(target)} ({e})") from None
    for path, array in zip(target, converted, strict=True):
      if shapes is not None and path in shapes and tuple(array.shape) != tuple(shapes[path]):
        raise ValueError(f"{mismatch} makes {path} {list(array.shape)}, where the model config.json describes has "
                         f"{list(shapes[path])}")
      params[path] = np.ascontiguousarray(array)  # now: a view's source (the tensor read) is freed at once.
  return params


def to_pretrained(rows: Sequence[Row], params: Mapping[str, np.ndarray],
                  num_layers: int) -> Iterator[tuple[str, np.ndarray]]:
  """(pretrained name, array) pairs from jformer's flat `params` (`flax.traverse_util.flatten_dict(..., sep="/")`),
  made one row and layer at a time as they are taken (a writer holds only what it has not written); every parameter
  must be written by a row, else ValueError (at the call) names the ones left over (parameters the family has no
  tensor for: a changed model)."""
  unwritten = sorted(set(params) - _read(rows, params, num_layers, to_jformer=False))
  if unwritten:
    raise ValueError(f"the model has parameters its family's checkpoint has no tensor for: {_some(unwritten)}")
  return ((name, array) for row, source, target in _pairs(rows, num_layers, to_jformer=False)
          for name, array in zip(target, row.transform.to_pretrained(*(np.asarray(params[n]) for n in source)),
                                 strict=True))
