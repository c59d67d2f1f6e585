#!/usr/bin/env bash
# Several policy searches side by side on one GPU machine, each pinned to its own host cores with taskset:
# scripts/bench_policies.py per line of a spec file, then one merged JSON document. A line runs native MuJoCo
# on its cores (no GPU), or Brax on one GPU of its own when its CORES column ends in /GPU. GPU_CMD, when set,
# runs alongside and its output goes to $OUT/gpu.log.
#
# Usage: [GPU_CMD='...'] [KERNELS=DIR] bash scripts/dev/gpu_policy_grid.sh [--out DIR] [--wheels DIR]
#        [--detach] SPEC
#   SPEC lines: NAME CORES[/GPU] TASK[:SEED] BUDGET [Hydra overrides...]   e.g.
#     walker_default 2-3   walker2d:1 400
#     cheetah_race   4-5   halfcheetah 400 'env.racing={horizon: 0.25, finalists: 0.25}'
#     swimmer_brax   6-7/0 swimmer 300
#     cheetah_long   0-15/0 halfcheetah 1650 --resume   (that run continued: bench_policies.py --resume)
#   KERNELS: the CUDA kernels' build folder (GPRL_CACHE of the Brax runs; default .gprl_cache_gpu), built once
#   before the Brax runs start; a folder built before on the same torch build is reused.
# Writes grid.json (every run's record: evaluation, generations, steps, curve; a run still going or stopped
# leaves its metrics.jsonl rows; rewritten every 20 s), logs.txt (each run's tail) and spec.txt. Each run gets
# its BUDGET + 120 s (Brax: + 180 s) before it is stopped.
# --detach: the grid runs in a session of its own (it outlives the shell that started it; output in
# OUT/driver.log, its exit status in OUT/exit_status at the end) and the command returns at once; follow it
# with `python3 scripts/dev/grid_status.py OUT [--wait SECONDS]`.
set -uo pipefail
source "$(dirname "$0")/gpu_common.sh"
detach=0 args=()
for a in "$@"; do if [ "$a" = --detach ]; then detach=1; else args+=("$a"); fi; done
gpu_args "${args[@]}"; set -- "${ARGS[@]}"
SPEC=${1:?usage: gpu_policy_grid.sh [--out DIR] [--detach] SPEC}
if [ "$detach" = 1 ]; then
  rm -f "$OUT/exit_status"
  setsid nohup bash -c 'bash "$0" --out "$1" --wheels "$2" "$3"; echo $? >"$1/exit_status"' \
    "$0" "$OUT" "$WHEELS" "$SPEC" >"$OUT/driver.log" 2>&1 </dev/null &
  echo "grid started in the background: python3 scripts/dev/grid_status.py $OUT"
  exit 0
fi
[ "$SPEC" -ef "$OUT/spec.txt" ] || cp "$SPEC" "$OUT/spec.txt"  # the runs grid_status.py follows
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} PYTHONUNBUFFERED=1 WANDB_MODE=disabled
gpu_install_wheels "$OUT/build.log"
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$OUT/build.log" 2>&1
nproc | tee -a "$OUT/build.log"
if [ -n "${GPU_CMD:-}" ]; then
  ( GPRL_CACHE=${KERNELS:-$PWD/.gprl_cache_gpu} bash -c "$GPU_CMD" >"$OUT/gpu.log" 2>&1 ) &
fi
# the kernel builds once (CPU-only for the MuJoCo runs, CUDA for the Brax runs), before the runs share them
KERNELS=${KERNELS:-$PWD/.gprl_cache_gpu}
( CUDA_VISIBLE_DEVICES= GPRL_CACHE=$PWD/.gprl_cache_cpu gpu_build "$OUT/build.log" ) &
cpu_build=$!
if grep -qE '^[^#[:space:]]+[[:space:]]+[^[:space:]]+/[0-9]' "$SPEC"; then
  GPRL_CACHE=$KERNELS gpu_build "$OUT/build.log"
fi
wait $cpu_build
runs=(); pids=()
while read -r name cores task budget rest; do
  [ -z "${name:-}" ] || [ "${name:0:1}" = "#" ] && continue
  eval "overrides=($rest)"
  resume=(); [ "${overrides[0]:-}" = --resume ] && { resume=(--resume); overrides=("${overrides[@]:1}"); }
  seed=0; [[ "$task" == *:* ]] && { seed=${task#*:}; task=${task%%:*}; }
  backend=mujoco gpu= cache=$PWD/.gprl_cache_cpu limit=$(( ${budget%.*} + 120 ))
  # a Brax run also compiles its environment twice (training, then the replay's batch of 10)
  [[ "$cores" == */* ]] && { backend=brax gpu=${cores#*/} cores=${cores%/*} cache=$KERNELS; limit=$(( limit + 60 )); }
  CUDA_VISIBLE_DEVICES=$gpu GPRL_CACHE=$cache XLA_PYTHON_CLIENT_PREALLOCATE=false \
    timeout $limit taskset -c "$cores" python3 scripts/bench_policies.py \
    --backend "$backend" --tasks "$task" --seeds "$seed" --budget "$budget" --out "/tmp/grid/$name" \
    "${resume[@]}" -- "${overrides[@]}" >"/tmp/grid_$name.log" 2>&1 &
  runs+=("$name"); pids+=($!)
done <"$SPEC"

merge() {
  python3 - "$OUT" "${runs[@]}" <<'EOF'
import glob, json, sys
out, names = sys.argv[1], sys.argv[2:]
doc = {}
for name in names:
    try:
        doc[name] = json.load(open(glob.glob(f"/tmp/grid/{name}/bench_policies_*.json")[0]))
    except (IndexError, OSError, ValueError):  # still running or stopped: its metrics so far
        doc[name] = {"metrics": [json.loads(line) for f in glob.glob(f"/tmp/grid/{name}/*/*/*/metrics.jsonl")
                                 for line in open(f) if line.strip()]}
json.dump(doc, open(f"{out}/grid.json", "w"))
EOF
}
while kill -0 "${pids[@]}" 2>/dev/null; do merge; sleep 20; done
wait "${pids[@]}"
merge
for name in "${runs[@]}"; do echo "== $name"; tail -5 "/tmp/grid_$name.log"; done >"$OUT/logs.txt"
wait
