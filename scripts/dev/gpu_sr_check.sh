#!/usr/bin/env bash
# Symbolic regression and classification on a GPU (scripts/dev/sr_check.py): Feynman I.9.18 test MSE and wall clock
# at 100,000 training rows; held-out accuracy on breast_cancer and wine over several splits.
#
# Usage: bash scripts/dev/gpu_sr_check.sh [--out DIR] [sr_check.py options...]
#   --out DIR   output folder (env OUT; default ./gpu_out): sr_build.log (device, kernel build time),
#               sr_check.log and sr_check.json
#   e.g. bash scripts/dev/gpu_sr_check.sh --cls-ensemble 10 --cls-options '{"validation_fraction": 0.2}' --seeds 20 --first-seed 30
# Run it from the repository root with python3, CUDA torch and scikit-learn installed (gprl importable from
# the checkout). About 6 minutes with the defaults, the one-time kernel build included;
# sr_check.py is stopped after 420 s. Environment: TORCH_CUDA_ARCH_LIST (default 9.0), GPRL_CACHE
# (default .gprl_cache/ in the checkout).
set -uo pipefail
source "$(dirname "$0")/gpu_common.sh"
gpu_args "$@"; set -- "${ARGS[@]}"
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} GPRL_CACHE=${GPRL_CACHE:-$PWD/.gprl_cache} PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/sr_build.log"
gpu_build "$OUT/sr_build.log"
timeout 420 python3 scripts/dev/sr_check.py --device cuda --out "$OUT/sr_check.json" "$@" 2>&1 | tee "$OUT/sr_check.log"
cat "$OUT/sr_check.json" 2>/dev/null || echo "sr_check.json missing: see $OUT/sr_check.log"
