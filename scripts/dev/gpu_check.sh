#!/usr/bin/env bash
# GPU check: install gprl, build the CUDA kernels, run the GPU tests, compute-sanitizer and the GPU benchmarks.
#
# Usage: bash scripts/dev/gpu_check.sh [--wheels DIR] [--out DIR] [pytest paths...]
#   --wheels DIR  folder of wheels (the simulators: brax, mujoco, ...) to install without network access into
#                 /tmp/site, put on PYTHONPATH (env WHEELS; default .whl/ when it holds any wheel)
#   --out DIR     output folder (env OUT; default ./gpu_out)
#   pytest paths  what `pytest -m gpu` runs (default: tests)
# Needs python3 with CUDA torch, nvcc and compute-sanitizer (JAX with CUDA for the Brax benchmark); run it from
# the repository root. Environment: TORCH_CUDA_ARCH_LIST (default 9.0, Hopper), GPRL_CACHE (kernel cache,
# default .gprl_cache/ in the checkout), SKIP_SANITIZER=1 (no compute-sanitizer).
# Writes to the output folder: build.log (install, device, kernel build time, sanitizer summaries),
# gpu_tests.log, bench_eval_cuda.json (scripts/bench_eval.py), bench_variation_cuda.json
# (scripts/bench_variation.py), bench_envs_brax.json (scripts/bench_envs.py --backends brax), bench.err
# (the benchmarks' stderr) and gprl_brax_step_trace.json when the Brax benchmark left one; prints a summary.
set -uo pipefail
source "$(dirname "$0")/gpu_common.sh"
gpu_args "$@"; set -- "${ARGS[@]}"
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} GPRL_CACHE=${GPRL_CACHE:-$PWD/.gprl_cache}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
gpu_install_wheels "$OUT/build.log"
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$OUT/build.log" 2>&1
nvidia-smi -L | tee -a "$OUT/build.log"
gpu_build "$OUT/build.log"
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider "${@:-tests}" 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 30
if [ -z "${SKIP_SANITIZER:-}" ]; then
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool $tool --print-limit 20 python3 scripts/dev/sanitize_eval.py 2>&1 \
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
