"""Scale-out: device meshes (data, fsdp, tensor), their logical-axis rules, and multi-host initialisation.

  mesh: `make_mesh` over axes ('data', 'fsdp', 'tensor'); parameters carry logical axis names in the modules,
    mapped to mesh axes by `LOGICAL_AXIS_RULES` (the one place they are set).
  distributed: `initialize_distributed` joins a multi-process job; `is_chief` is process 0.

The runners that jit or pmap the train step over these live with the step, in `jformer.train.runner`.
"""

from jformer.parallel.distributed import initialize_distributed, is_chief
from jformer.parallel.mesh import LOGICAL_AXIS_RULES, MESH_AXES, make_mesh

__all__ = ["LOGICAL_AXIS_RULES", "MESH_AXES", "initialize_distributed", "is_chief", "make_mesh"]
