#!/usr/bin/env bash
# Compiles the CUDA sources without a GPU (syntax and template errors only): bash scripts/dev/nvcc_check.sh [files]
set -euo pipefail
TI=$(python -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'include'))")
# the CPU build of torch lacks this generated header; an empty one suffices for compiling
STUB=$(mktemp -d); mkdir -p "$STUB/c10/cuda/impl"; echo '#pragma once' > "$STUB/c10/cuda/impl/cuda_cmake_macros.h"
files=("$@"); [ ${#files[@]} -gt 0 ] || files=(kernels/*.cu)
for f in "${files[@]}"; do
  nvcc -std=c++17 -O1 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -DTORCH_EXTENSION_NAME=check \
    -Ikernels -isystem "$TI" -isystem "$STUB" -isystem "$TI/torch/csrc/api/include" -isystem /usr/local/cuda/include \
    -isystem "$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
    --compiler-options -fPIC -c "$f" -o /tmp/nvcc_check_$$.o
  echo "ok: $f"
done
