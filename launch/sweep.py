"""Sweep files: a base config and a list of override points, expanded, named and validated before launch.

A sweep file (`configs/sweeps/<name>.py`) defines

    BASE = "configs/demo.py"              # config every point starts from ("path:arg" calls get_config(arg))
    FIXED = {"train.steps": 100}          # optional: overrides for every point (a point's own value wins)
    SLURM = {"nodes": 1, "time": "1:00:00"}        # optional: launch.backends.slurm.Settings fields
    TPU = {"name": "my-v4", "zone": "us-central2-b"}  # optional: launch.backends.tpu_vm.Settings fields
    FIGURE = {"metric": "test_accuracy", "x": "model.d_model", ...}  # optional: the best-of figure (launch/best_of.py)
    REPORT_KEYS = ("model.vocab_size",)   # optional: keys recorded with the value each run used (e.g. a recipe's)

    def row_of(overrides):                # optional: the name of a point's row in reports (its seeds left out)
      return overrides["model.attention"]

    def get_sweep():
      return sweep.product(sweep.axis("model.attention", ["dot_product", "xla"]),
                           sweep.axis("optimizer.warmup_steps", [100, 400]))

`get_sweep()` returns a list of `{dotted config key: value}` dicts, one per point: build it with `axis`,
`product` and `zip` (they compose), or write the list out. Every point gets a stable, path-safe name from its
own overrides (`attention=xla,warmup_steps=400`) and runs in `<root>/<sweep>/<point>/`. `load` checks every
point with `jformer.config.load` before anything runs, so a bad key or value fails naming the point.
"""

from __future__ import annotations

import builtins
import dataclasses
import hashlib
import itertools
import os
import pathlib
import re
from typing import Any, Callable, Iterable, Mapping

MAX_NAME_LENGTH = 120  # Longer names are cut and end in a hash of the full name.


class SweepError(ValueError):
  """A sweep file or one of its points is invalid; the message names the file, point and key."""


def axis(key: str, values: Iterable[Any]) -> list[dict[str, Any]]:
  """One swept key: `[{key: v} for v in values]`."""
  values = list(values)
  if not values:
    raise SweepError(f"axis '{key}' has no values")
  return [{key: value} for value in values]


def product(*axes: list[dict[str, Any]]) -> list[dict[str, Any]]:
  """Every combination of the axes' points, the first axis varying slowest."""
  return [_merge(combination) for combination in itertools.product(*axes)]


def zip(*axes: list[dict[str, Any]]) -> list[dict[str, Any]]:  # noqa: A001 (sweep.zip reads as intended).
  """The axes' points side by side (the i-th point merges the i-th of each axis); lengths must match."""
  lengths = [len(a) for a in axes]
  if len(set(lengths)) > 1:
    raise SweepError(f"zip needs axes of one length, got lengths {lengths}")
  return [_merge(combination) for combination in builtins.zip(*axes)]


def _merge(points: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
  merged = {}
  for point in points:
    for key, value in point.items():
      if key in merged:
        raise SweepError(f"key '{key}' is set by two combined axes")
      merged[key] = value
  return merged


def cli_value(value: Any) -> str:
  """`value` as typed after `--config.key=` (jformer.config converts it back to the field's type)."""
  if isinstance(value, bool):
    return "true" if value else "false"
  return value if isinstance(value, str) else repr(value)


@dataclasses.dataclass(frozen=True)
class Point:
  """One run of a sweep: its name (a folder name), its own overrides and the train.steps it runs to."""
  name: str
  overrides: dict[str, Any]
  steps: int


@dataclasses.dataclass(frozen=True)
class Sweep:
  """An expanded, validated sweep: what every backend launches."""
  name: str
  base: str
  fixed: dict[str, Any]
  points: tuple[Point, ...]
  slurm: dict[str, Any] = dataclasses.field(default_factory=dict)
  tpu: dict[str, Any] = dataclasses.field(default_factory=dict)
  figure: dict[str, Any] = dataclasses.field(default_factory=dict)  # FIGURE (launch/best_of.py), if defined
  row_of: Callable[[dict], str] | None = dataclasses.field(default=None, compare=False)  # the file's row_of
  report_keys: tuple[str, ...] = ()  # REPORT_KEYS: config keys reported with the value each point's run used

  @property
  def keys(self) -> list[str]:
    """The swept keys, in order of first appearance."""
    return list(dict.fromkeys(key for point in self.points for key in point.overrides))

  def workdir(self, root: str, point: Point) -> str:
    return os.path.join(root, self.name, point.name)

  def common_args(self) -> list[str]:
    """`--config.key=value` of the FIXED keys that no point sets (the same for every point)."""
    return _args({key: value for key, value in self.fixed.items() if key not in self.keys})

  def swept_values(self, point: Point) -> dict[str, Any]:
    """The point's values of the swept keys: its own, or FIXED ones where it has none."""
    return {**{key: value for key, value in self.fixed.items() if key in self.keys}, **point.overrides}

  def point_args(self, point: Point) -> list[str]:
    """`--config.key=value` of `swept_values(point)`."""
    return _args(self.swept_values(point))

  def train_args(self, point: Point, workdir: str) -> list[str]:
    """Arguments of `jformer` (`python -m jformer.main`) that train `point` in `workdir`."""
    return ["train", f"--config={self.base}", f"--workdir={workdir}", *self.common_args(), *self.point_args(point)]


def _args(overrides: Mapping[str, Any]) -> list[str]:
  return [f"--config.{key}={cli_value(value)}" for key, value in overrides.items()]


def load(path: str | os.PathLike, *, backend: str | None = None) -> Sweep:
  """Reads a sweep file, expands and validates its points for JAX backend `backend` ('cpu', 'gpu', 'tpu', None:
  not known, `jformer.config.validate`); raises SweepError before anything runs."""
  from jformer import config as config_lib  # Imports jax: only when a sweep is loaded.

  file = pathlib.Path(path)
  try:
    module = config_lib.import_file(file, "sweep", "--sweep=configs/sweeps/attention_variants.py")
  except (FileNotFoundError, ValueError) as e:  # Missing, or does not parse.
    raise SweepError(str(e)) from None
  for required in ("BASE", "get_sweep"):
    if not hasattr(module, required):
      raise SweepError(f"sweep file '{file}' defines no {required} (see launch/README.md)")
  expanded = expand(_path_safe(file.stem), module.BASE, module.get_sweep(), fixed=getattr(module, "FIXED", {}),
                    slurm=getattr(module, "SLURM", {}), tpu=getattr(module, "TPU", {}), backend=backend)
  return dataclasses.replace(expanded, figure=dict(getattr(module, "FIGURE", {})),
                             row_of=getattr(module, "row_of", None),
                             report_keys=tuple(getattr(module, "REPORT_KEYS", ())))


def expand(name: str, base: str, points: list[Mapping[str, Any]], *, fixed: Mapping[str, Any] | None = None,
           slurm: Mapping[str, Any] | None = None, tpu: Mapping[str, Any] | None = None,
           backend: str | None = None) -> Sweep:
  """Names and validates `points` (override dicts) on `base` with `fixed`, for JAX backend `backend` (`load`);
  raises SweepError naming the point."""
  if not isinstance(points, (list, tuple)) or not points or not all(isinstance(p, Mapping) for p in points):
    raise SweepError(f"sweep '{name}': get_sweep() must return a non-empty list of {{config key: value}} dicts")
  fixed = dict(fixed or {})
  names = point_names(points)
  seen = {}
  expanded = []
  for index, (point_name, overrides) in enumerate(builtins.zip(names, points)):
    if point_name in seen:
      raise SweepError(f"sweep '{name}': points {seen[point_name]} and {index} are both '{point_name}'; "
                       f"give every point distinct values")
    seen[point_name] = index
    steps = _validate(name, base, fixed, index, point_name, dict(overrides), backend)
    expanded.append(Point(point_name, dict(overrides), steps))
  return Sweep(name, base, fixed, tuple(expanded), dict(slurm or {}), dict(tpu or {}))


def _validate(sweep_name, base, fixed, index, point_name, overrides, backend) -> int:
  """Loads the point's config exactly as the command line will pass it, for `backend`; returns its train.steps."""
  from jformer import config as config_lib  # Imports jax: only when a sweep is expanded.
  from jformer import data

  strings = {key: cli_value(value) for key, value in {**fixed, **overrides}.items()}
  try:
    config = config_lib.load(base, strings, backend=backend)
    data.get_dataset(config.data.dataset)
    return config.train.steps
  except FileNotFoundError as e:
    raise SweepError(f"sweep '{sweep_name}': BASE: {e} (relative paths are read from the current directory: "
                     f"launch from the project root)") from e
  except (KeyError, ValueError, TypeError) as e:
    message = e.args[0] if isinstance(e, KeyError) and e.args else e
    raise SweepError(f"sweep '{sweep_name}': point {index} '{point_name}' {overrides}: {message}") from e


def point_names(points: list[Mapping[str, Any]]) -> list[str]:
  """`leaf=value,leaf=value` per point; a key whose last part is shared by another swept key keeps its full
  dotted name. Unsafe characters become '_'; a name over MAX_NAME_LENGTH is cut and ends in a hash."""
  keys = list(dict.fromkeys(key for point in points for key in point))
  leaves = [key.rsplit(".", 1)[-1] for key in keys]
  label = {key: leaf if leaves.count(leaf) == 1 else key for key, leaf in builtins.zip(keys, leaves)}
  return [_path_safe(",".join(f"{label[k]}={cli_value(v)}" for k, v in point.items()) or "base")
          for point in points]


def _path_safe(name: str) -> str:
  safe = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9._,=+-]", "_", name))
  if len(safe) > MAX_NAME_LENGTH:
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    safe = f"{safe[:MAX_NAME_LENGTH - 11]}-{digest}"
  return safe
