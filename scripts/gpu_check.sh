#!/usr/bin/env bash
# On the lent GPU machine (offline; torch, JAX and nvcc preinstalled): install the simulator wheels from
# .whl/ (see ../shared/GPU.md), build the kernels, run every GPU test and the benchmarks. Logs go to $OUT
# (default ./gpu_out; at most 8 files come back from the lent machine). Usage: bash scripts/gpu_check.sh [pytest paths...]
set -uo pipefail
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} GPRL_CACHE=${GPRL_CACHE:-$PWD/.gprl_cache}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >"$OUT/build.log" 2>&1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$OUT/build.log" 2>&1
nvidia-smi -L | tee -a "$OUT/build.log"
start=$(date +%s)
python3 -c "import gprl.ops, gprl._build as b; print('cuda kernels:', b.has_cuda_kernels())" 2>&1 | tee -a "$OUT/build.log"
echo "build seconds: $(( $(date +%s) - start ))" | tee -a "$OUT/build.log"
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider "${@:-tests}" 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 30
if [ -z "${SKIP_SANITIZER:-}" ]; then
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool --print-limit 20 python3 scripts/sanitize_eval.py 2>&1 \
      | tail -n 4 | sed "s/^/[$tool] /" | tee -a "$OUT/build.log"
  done
fi
timeout 120 python3 scripts/bench_eval.py --device cuda > "$OUT/bench_eval_cuda.json" 2>> "$OUT/bench.err"
timeout 60 python3 scripts/bench_variation.py --device cuda --sizes 1000 10000 100000 1000000 \
  > "$OUT/bench_variation_cuda.json" 2>> "$OUT/bench.err"
timeout 480 python3 scripts/bench_envs.py --backends brax --device cuda \
  > "$OUT/bench_envs_brax.json" 2>> "$OUT/bench.err"
cp /tmp/gprl_brax_step_trace.json "$OUT/" 2>/dev/null || true
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in ("bench_eval_cuda.json", "bench_variation_cuda.json"):
    try:
        print(name, json.dumps(json.loads((out / name).read_text()))[:3000])
    except Exception as e:
        print(name, "unreadable:", e)
keys = ("task", "num_envs", "steps", "live_fraction", "steps_per_s", "raw_steps_per_s", "overhead_pct",
        "ours_host_us_per_step", "ours_synced_us_per_step", "raw_host_us_per_step", "raw_synced_us_per_step", "error")
for line in (out / "bench_envs_brax.json").read_text().splitlines():
    if line.startswith('{"backend"'):
        rec = json.loads(line)
        print({k: rec[k] for k in keys if k in rec})
PY
