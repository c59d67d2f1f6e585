#!/usr/bin/env bash
# On the lent GPU machine (offline; torch + nvcc preinstalled): build the kernels, run the GPU tests and the
# evaluation benchmark. Logs go to $OUT (or ./gpu_out). Usage: bash scripts/gpu_check.sh [pytest args...]
set -uo pipefail
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export GPRL_CACHE=${GPRL_CACHE:-/tmp/gprl_cache} PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$OUT/device.txt"
start=$(date +%s)
python3 -c "import gprl.ops, gprl._build as b; print('cuda kernels:', b.has_cuda_kernels())" 2>&1 | tee "$OUT/build.log"
echo "build seconds: $(( $(date +%s) - start ))" | tee -a "$OUT/build.log"
python3 -m pytest -m gpu -q -p no:cacheprovider "${@:-tests}" 2>&1 | tee "$OUT/gpu_tests.log"
python3 scripts/bench_eval.py --device cuda > "$OUT/bench_eval_cuda.json" 2> "$OUT/bench_eval_cuda.err"
python3 - "$OUT/bench_eval_cuda.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["device"])
for r in d["results"]:
    print(f'P={r["P"]:>7} D={r["D"]:>7} size={r["mean_size"]:.1f} GPops/s={r["gpops"]:.3g}')
PY
