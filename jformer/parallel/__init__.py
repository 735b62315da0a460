"""Scale-out: device meshes (data, fsdp, tensor), the pmap wrapper, and multi-host initialisation.

One pure `train_step` (jformer.train.step) runs under either wrapper:
  mesh (default): `jax.jit` over a `Mesh` with axes ('data', 'fsdp', 'tensor'); parameters carry logical
    axis names in the modules, mapped to mesh axes by `LOGICAL_AXIS_RULES` (the one place they are set).
  pmap: classic data parallel, the same step with gradients summed over the 'batch' axis.
"""

from jformer.parallel.distributed import initialize_distributed, is_chief
from jformer.parallel.mesh import LOGICAL_AXIS_RULES, MESH_AXES, make_mesh
from jformer.parallel.runner import MeshRunner, PmapRunner, make_runner

__all__ = ["LOGICAL_AXIS_RULES", "MESH_AXES", "MeshRunner", "PmapRunner", "initialize_distributed", "is_chief",
           "make_mesh", "make_runner"]
