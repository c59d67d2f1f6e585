#!/usr/bin/env bash
# scripts/bench_srbench.py on a GPU machine without network access: the wheels in .whl/ (pyoperon, gplearn,
# scikit-learn, pandas and their pure-Python dependencies, for Python 3.12), the kernel build, then the
# benchmark with the given options. TESTS=1 first runs the GPU tests of the evaluation kernels and the
# evolution (tests/backend/test_gpu.py, tests/evolve/test_gpu.py).
#
# Usage: [TESTS=1] bash scripts/dev/gpu_srbench.sh [--out DIR] [bench_srbench.py options...]
#   e.g. bash scripts/dev/gpu_srbench.sh --out $OUT --problems feynman --every 4 --engines gprl --time 10 \
#          --out $OUT/gprl.json
#   (--out is this script's output folder: build.log, tests.log; pass the benchmark's own --out after it)
set -uo pipefail
source "$(dirname "$0")/gpu_common.sh"
gpu_args "$@"; set -- "${ARGS[@]}"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} GPRL_CACHE=${GPRL_CACHE:-$PWD/.gprl_cache}
export PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/build.log"
gpu_install_wheels "$OUT/build.log"
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$OUT/build.log" 2>&1
gpu_build "$OUT/build.log"
if [ "${TESTS:-0}" = 1 ]; then
  python3 -m pytest -q -m gpu tests/backend/test_gpu.py tests/evolve/test_gpu.py 2>&1 | tail -25 \
    | tee "$OUT/tests.log"
fi
[ $# -gt 0 ] && python3 scripts/bench_srbench.py "$@"
