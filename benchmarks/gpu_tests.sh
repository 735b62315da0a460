#!/usr/bin/env bash
# The GPU test subset: the ops, the attention variants and kernels, the block options, the models and beam search run
# on one GPU (JAX_PLATFORMS=cuda), float32 matmuls at full precision (the tests' tolerances are float32's; TF32 would
# miss them). Writes a JUnit XML; benchmarks/results/gpu_tests_*.json summarises one run of it.
#
#     bash benchmarks/gpu_tests.sh [OUT_DIR]        # on a machine with a GPU and the project installed
set -u
out=${1:-${OUT:-.}}
export XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.1  # six test processes share the GPU.
python3 -c "import xdist" 2>/dev/null && workers="-n 6" || workers="-p no:xdist"
JAX_PLATFORMS=cuda JAX_DEFAULT_MATMUL_PRECISION=highest python3 -m pytest -q -o addopts= $workers -p no:cacheprovider \
  -m 'not slow and not integration' -rfE --tb=line --junitxml="$out/gpu_tests.xml" \
  tests/test_ops_attention.py tests/test_ops_masks.py tests/test_ops_positional.py tests/test_ops_losses.py \
  tests/test_ops_linear_cross_entropy.py tests/test_ops_dropout.py tests/test_attention_variants.py \
  tests/test_attention_similarity.py tests/test_attention_kernels.py tests/test_block_options.py \
  tests/test_models.py tests/test_models_positional.py tests/test_decode_search.py
