"""Scale-out: device meshes (data, fsdp, sequence, tensor) and multi-host initialisation.

  mesh: `make_mesh` over axes ('data', 'fsdp', 'sequence', 'tensor'); parameters carry logical axis names in the
    modules, mapped to mesh axes by `jformer.axes.RULES` (the one place they are set).
  distributed: `initialize_distributed` joins a multi-process job; `is_chief` is process 0, `say` prints there.

The runners that jit or pmap the train step over these live with the step, in `jformer.train.runner`.
"""

from jformer.parallel.distributed import initialize_distributed, is_chief, say
from jformer.parallel.mesh import make_mesh

# `parallel.mode`: jit over a device mesh, or classic data parallelism (`jformer.train.runner` runs each).
MESH, PMAP = "mesh", "pmap"
MODES = (MESH, PMAP)

__all__ = ["MESH", "MODES", "PMAP", "initialize_distributed", "is_chief", "make_mesh", "say"]
