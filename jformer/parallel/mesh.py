"""The device mesh over the axes ('data', 'fsdp', 'sequence', 'tensor'); the logical-axis rules that map onto it are in
`jformer.axes` (the only place shardings are decided)."""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh

from jformer.axes import MESH_AXES


def mesh_shape(parallel_config, num_devices: int | None = None) -> dict[str, int]:
  """{'data': d, 'fsdp': f, 'sequence': s, 'tensor': t} with one -1 resolved to the remaining devices; an axis
  the config does not name has size 1.

  Without a -1 the mesh may use fewer devices than there are (e.g. 1x1x1x1 = one device).
  """
  num_devices = jax.device_count() if num_devices is None else num_devices
  sizes = {axis: int(parallel_config.get(axis, 1)) for axis in MESH_AXES}
  unknown = [axis for axis, size in sizes.items() if size == -1]
  if len(unknown) > 1:
    raise ValueError(f"only one of parallel.data/fsdp/sequence/tensor may be -1 (the rest of the devices); got "
                     f"{sizes}")
  known = math.prod(size for size in sizes.values() if size != -1)
  if any(size == 0 or size < -1 for size in sizes.values()):
    raise ValueError(f"parallel.data/fsdp/sequence/tensor must be positive or -1; got {sizes}")
  if unknown:
    if num_devices % known:
      raise ValueError(f"{num_devices} devices are not divisible by the fixed mesh axes {sizes}")
    sizes[unknown[0]] = num_devices // known
  if math.prod(sizes.values()) > num_devices:
    raise ValueError(f"mesh {sizes} needs {math.prod(sizes.values())} devices but {num_devices} are available; set "
                     f"parallel.data, fsdp, sequence and tensor to sizes whose product is at most {num_devices}, "
                     "e.g. --config.parallel.data=-1 --config.parallel.fsdp=1 --config.parallel.sequence=1 "
                     "--config.parallel.tensor=1 (the batch over every device: a run's checkpoints resume on any mesh)")
  return sizes


def make_mesh(parallel_config, devices=None) -> Mesh:
  """A Mesh over the first data*fsdp*sequence*tensor of all (or the given) devices, axes `MESH_AXES`."""
  devices = jax.devices() if devices is None else devices
  sizes = mesh_shape(parallel_config, len(devices))
  shape = tuple(sizes[axis] for axis in MESH_AXES)
  devices = devices[:math.prod(shape)]
  try:
    device_array = mesh_utils.create_device_mesh(shape, devices=devices)
  except (ValueError, NotImplementedError, AssertionError):  # CPU / unusual topologies: plain order.
    device_array = np.asarray(devices).reshape(shape)
  return Mesh(device_array, MESH_AXES)

