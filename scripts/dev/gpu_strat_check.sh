#!/usr/bin/env bash
# Evaluation strategies on a GPU: build the kernels, calibrate the strategy cost model from an empty cache
# (timed), run the GPU tests (tests/backend/test_gpu.py: every strategy against the CPU) and the CPU-side
# strategy and op-check tests, time every strategy against the automatic choice (bench_eval.py --strategies, for fitness
# and forward), run the default SR-fitness benchmark (the peak throughput; compare results/README.md on the same
# device) and compute-sanitizer memcheck of every strategy (scripts/dev/sanitize_eval.py).
#
# Usage: bash scripts/dev/gpu_strat_check.sh [--out DIR]
#   --out DIR  output folder (env OUT; default ./gpu_out): build.log (device, build and calibration times),
#              calibration.json (the cost model's tables), gpu_tests.log, bench_strategies.json,
#              bench_forward.json, bench_default.json, bench.err and sanitizer.log
# Needs python3 with CUDA torch, nvcc and compute-sanitizer; runs gprl from the checkout (PYTHONPATH), not an
# installed copy. About 4 minutes on an H100, build included. Environment: DEADLINE_S (default 560: the whole
# script's time budget; later steps get what is left), SKIP_SANITIZER=1, TORCH_CUDA_ARCH_LIST (default 9.0),
# GPRL_CACHE (default /tmp/gprl_cache; its strategy/ tables are deleted first).
set -uo pipefail
source "$(dirname "$0")/gpu_common.sh"
gpu_args "$@"; set -- "${ARGS[@]}"
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} GPRL_CACHE=${GPRL_CACHE:-/tmp/gprl_cache}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # the checkout, not an installed gprl
deadline=$(( $(date +%s) + ${DEADLINE_S:-560} ))
left() { echo $(( deadline - $(date +%s) )); }
budget() { local b=$(( $(left) - $1 )); echo $(( b > $2 ? b : $2 )); }  # time left minus $1, at least $2

# 1. build.log: device, build, calibration time from an empty strategy cache
nvidia-smi -L | tee "$OUT/build.log"
gpu_build "$OUT/build.log"
rm -rf "$GPRL_CACHE/strategy"
python3 - <<'PY' 2>&1 | tee -a "$OUT/build.log"
import time, warnings
import torch
from gprl import strategy
warnings.simplefilter("error")  # a failed calibration raises here instead of falling back quietly
dev = torch.device("cuda", 0)
for op in strategy.OP_STRATEGIES:
    t0 = time.perf_counter()
    strategy.model(dev, op)
    print(f"calibration {op}: {time.perf_counter() - t0:.2f} s")
PY
# 2. calibration.json: the cached tables
cp "$GPRL_CACHE"/strategy/*.json "$OUT/calibration.json" 2>/dev/null

# 3. gpu_tests.log: every GPU test, then the CPU-side strategy and op-check tests (this machine's toolchain)
timeout "$(budget 240 90)" python3 -m pytest -q -p no:cacheprovider -m gpu tests/backend/test_gpu.py 2>&1 \
  | tee "$OUT/gpu_tests.log" | tail -n 25
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/backend/test_strategy.py tests/core/test_api.py 2>&1 | tee -a "$OUT/gpu_tests.log" \
  | tail -n 3
echo "time left: $(left) s"

# 4-7. benchmarks (stderr of all into bench.err)
timeout "$(budget 150 60)" python3 scripts/bench_eval.py --strategies \
  --pop 100 1000 10000 100000 1000000 --rows 60 392 20640 100000 --max-work 3e10 > "$OUT/bench_strategies.json" 2> "$OUT/bench.err"
timeout "$(budget 110 30)" python3 scripts/bench_eval.py --strategies --op forward --pop 100 1000 10000 \
  --rows 60 392 20640 > "$OUT/bench_forward.json" 2>> "$OUT/bench.err"
timeout "$(budget 70 30)" python3 scripts/bench_eval.py --device cuda > "$OUT/bench_default.json" 2>> "$OUT/bench.err"

# 8. sanitizer.log
if [ -z "${SKIP_SANITIZER:-}" ] && [ "$(left)" -gt 45 ]; then
  timeout "$(budget 10 30)" compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/dev/sanitize_eval.py \
    2>&1 | tail -n 6 | tee "$OUT/sanitizer.log"
else
  echo "sanitizer skipped (time left: $(left) s)" | tee "$OUT/sanitizer.log"
fi

python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for name in ("bench_strategies.json", "bench_forward.json"):
    try:
        doc = json.loads((out / name).read_text())
    except Exception as e:
        print(name, "unreadable:", e)
        continue
    print(f"\n{doc['benchmark']} on {doc['device']} (calibration {doc['calibration_seconds']} s, "
          f"cached={doc['calibration_cached']}); worst auto/best = {doc['worst_auto_over_best']}, "
          f"worst picked-fixed/best = {doc['worst_pick_over_best']}")
    print(f"{'P':>7} {'D':>7} | {'best fixed':>10} {'us':>9} | {'auto':>10} {'us':>9} {'ratio':>6} {'pick':>6} | "
          f"{'GPops/s':>8} {'b2b us':>7} | model's pick")
    for c in doc["cells"]:
        s = c["seconds"]
        pred = c.get("predicted_seconds") or {}
        pick = min(pred, key=pred.get) if pred else "-"
        b2b = f"{c['back_to_back_seconds'] * 1e6:7.1f}" if "back_to_back_seconds" in c else "      -"
        print(f"{c['P']:>7} {c['D']:>7} | {c['best']:>10} {s[c['best']] * 1e6:9.1f} | {c['auto']:>10} "
              f"{s['auto'] * 1e6:9.1f} {c['auto_over_best']:6.2f} {c['pick_over_best']:6.2f} | {c['gpops_auto']:8.2e} {b2b} | {pick}")
    print("all strategies (us):", json.dumps([{"P": c["P"], "D": c["D"]} | {k: round(v * 1e6, 1) for k, v in
                                              c["seconds"].items()} for c in doc["cells"]])[:4000])
try:
    doc = json.loads((out / "bench_default.json").read_text())
    peak = max(doc["results"], key=lambda r: r["gpops"])
    print(f"\ndefault sr_fitness (built-in heuristic) on {doc['device']}: peak {peak['gpops']:.3g} GPops/s "
          f"at P={peak['P']} D={peak['D']} (compare results/README.md, same device)")
except Exception as e:
    print("bench_default.json unreadable:", e)
print("\nbench stderr tail:\n" + "".join((out / "bench.err").read_text().splitlines(True)[-5:]))
PY
