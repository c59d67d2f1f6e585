#!/usr/bin/env bash
# On the lent GPU (offline; python3 + CUDA torch + scikit-learn preinstalled, gprl installed), from the repo
# root: the H100 "must show" items for symbolic regression/classification (Feynman I.9.18 MSE and
# wall clock at 100,000 rows; held-out accuracy on breast_cancer and wine). Writes JSON and logs to $OUT
# (default ./gpu_out); about 6 minutes including the one-time kernel build. Extra arguments go to sr_check.py, e.g.
#   bash scripts/gpu_sr_check.sh --cls-ensemble 10 --cls-options '{"validation_fraction": 0.2}' --seeds 20 --first-seed 30
set -uo pipefail
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} GPRL_CACHE=${GPRL_CACHE:-$PWD/.gprl_cache} PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/sr_build.log"
start=$(date +%s)
python3 -c "import gprl.ops, gprl._build as b; print('cuda kernels:', b.has_cuda_kernels())" 2>&1 | tee -a "$OUT/sr_build.log"
echo "build seconds: $(( $(date +%s) - start ))" | tee -a "$OUT/sr_build.log"
timeout 420 python3 scripts/sr_check.py --device cuda --out "$OUT/sr_check.json" "$@" 2>&1 | tee "$OUT/sr_check.log"
cat "$OUT/sr_check.json" 2>/dev/null || echo "sr_check.json missing: see $OUT/sr_check.log"
