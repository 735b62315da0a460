"""XLA flags of every process of the test run: pytest's, its workers' and the commands tests start (no imports, so
that it is read before jax).

Test programs are tiny and compiled once or a few times, so compiling is most of their time. XLA's LLVM back end at
-O0 and XLA:CPU's classic fusion emitters compile the tests' model op by op in under half the time of XLA's defaults,
and its jitted train step in about half, while its steps run about 2x slower (docs/results/compile_flags.md). The
optimized HLO, hence what is computed, is the same; only the machine code is generated with fewer passes.
"""

COMPILE_FAST = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def with_devices(count: int) -> str:
  """XLA_FLAGS for a process of the test run with `count` simulated CPU devices."""
  return f"--xla_force_host_platform_device_count={count} {COMPILE_FAST}"
