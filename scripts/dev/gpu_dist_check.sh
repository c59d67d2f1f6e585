#!/usr/bin/env bash
# Multi-GPU scaling of one search: `train.py env=hopper` (Brax, gp.population_size=20000) in one process on one
# GPU against `torchrun --nproc_per_node=K` on K GPUs (K = 2, and 4 where there are 4), same seed. Each run does a
# warm-up generation (JAX compilation) and MEASURED more; a generation's time is the wall clock between the
# ends of consecutive evaluations (variation, broadcast and evaluation: everything of a generation). Prints
# one JSON line (per-generation times, medians, speed-up over one GPU, and whether the K-GPU run ended with
# the one-GPU run's population and returns: expected only where the simulator gives the same bits for a
# shard of the batch as for the whole batch) and writes it to OUT/result.json, with report.txt (install,
# devices, kernel build, run times), train_k<K>.log and metrics_k<K>.jsonl. About 2 minutes a run plus the
# kernel build.
#
# Usage: [MEASURED=3] [LENGTH=300] [KS="2 4"] [POP=20000] [BACKEND=brax] [DEVICE=cuda] \
#          bash scripts/dev/gpu_dist_check.sh [--wheels DIR] [--out DIR] [extra Hydra overrides]
#   --wheels DIR  folder of wheels to install without network access into /tmp/site, put on PYTHONPATH (env
#                 WHEELS; default .whl/ when it holds any wheel): the simulators and the training app's
#                 dependencies (hydra-core, omegaconf, antlr4-python3-runtime, tqdm; see gpu_train_check.sh)
#   --out DIR     output folder (env OUT; default ./gpu_out); the full run directories go to RUNS
#                 (default /tmp/gprl_dist_runs)
# Environment: NGPU (default: the GPUs nvidia-smi lists), NO_INSTALL=1 (use the installed gprl and packages),
# TORCH_CUDA_ARCH_LIST (default 9.0), GPRL_CACHE (default .gprl_cache/ in the checkout).
# NVLink multicast (NVLS) is off for NCCL and torch's symmetric memory, as in the runs of results/README.md;
# drop the export of NCCL_NVLS_ENABLE etc. below to let NCCL use it.
# Dry run of the script's logic on a CPU machine (gloo, no install):
#   NO_INSTALL=1 NGPU=2 BACKEND=mujoco DEVICE=cpu POP=40 LENGTH=50 bash scripts/dev/gpu_dist_check.sh
set -uo pipefail
source "$(dirname "$0")/gpu_common.sh"
gpu_args "$@"; set -- "${ARGS[@]}"
mkdir -p "$OUT"
MEASURED=${MEASURED:-3}; LENGTH=${LENGTH:-300}; POP=${POP:-20000}
RUNS=${RUNS:-/tmp/gprl_dist_runs}  # the full run directories (checkpoints included), outside OUT
rm -rf "$RUNS"; mkdir -p "$RUNS"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} GPRL_CACHE=${GPRL_CACHE:-$PWD/.gprl_cache}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false WANDB_MODE=disabled
# NVLink multicast off (see the header)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BACKEND=${BACKEND:-brax}; DEVICE=${DEVICE:-cuda}
[ -z "${NO_INSTALL:-}" ] && gpu_install_wheels "$OUT/report.txt"
[ -z "${NO_INSTALL:-}" ] && python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$OUT/report.txt" 2>&1
nvidia-smi -L 2>&1 | tee -a "$OUT/report.txt"
NGPU=${NGPU:-$(nvidia-smi -L | grep -c '^GPU')}
KS=${KS:-$( [ "$NGPU" -ge 4 ] && echo "2 4" || echo "2" )}
python3 -c "import hydra, omegaconf, tqdm, $BACKEND" 2>>"$OUT/report.txt" || {
  echo "missing hydra-core/omegaconf/tqdm/$BACKEND: install them or put their wheels in $WHEELS (see scripts/dev/gpu_train_check.sh)" | tee -a "$OUT/report.txt"
  exit 1; }
gpu_build "$OUT/report.txt"

# fixed episode length (no schedule), validation in the training batch (no second compilation)
ARGS=(env=hopper "env.backend=$BACKEND" "device=$DEVICE" "gp.population_size=$POP" "gp.generations=$(( MEASURED + 1 ))"
      "env.episode_length=$LENGTH" "env.episode_schedule={start: $LENGTH, ramp_generations: 0}" task.validation_episodes=0
      checkpoint_every=1000 wandb.mode=disabled progress=false seed=0 "$@")
for K in 1 $KS; do
  if [ "$K" -gt "$NGPU" ]; then echo "K=$K: only $NGPU GPUs, skipped" | tee -a "$OUT/report.txt"; continue; fi
  t0=$(date +%s)
  if [ "$K" -eq 1 ]; then
    timeout 300 python3 train.py "${ARGS[@]}" hydra.run.dir="$RUNS/k1" >"$OUT/train_k1.log" 2>&1
  else
    timeout 300 python3 -m torch.distributed.run --standalone --nproc_per_node="$K" train.py "${ARGS[@]}" \
      hydra.run.dir="$RUNS/k$K" >"$OUT/train_k$K.log" 2>&1
  fi
  echo "K=$K: exit $? after $(( $(date +%s) - t0 )) s (wall clock incl. start-up, compilation, export)" | tee -a "$OUT/report.txt"
  cp "$RUNS/k$K/metrics.jsonl" "$OUT/metrics_k$K.jsonl" 2>/dev/null
  tail -n 3 "$OUT/train_k$K.log"
done

python3 - "$OUT" "$RUNS" "$MEASURED" "$POP" "$LENGTH" "$*" <<'PY' 2>&1 | tee -a "$OUT/report.txt"
import json, pathlib, statistics, sys
import torch
out, runs, measured, pop, length = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), *map(int, sys.argv[3:6])
res = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
       "gpus": torch.cuda.device_count(), "population_size": pop,
       "episode_length": length, "overrides": sys.argv[6], "measured_generations": measured, "runs": {}, "speedup": {}, "identical": {}}
final = {}
for d in sorted(runs.glob("k*"), key=lambda p: int(p.name[1:])):
    k = int(d.name[1:])
    try:
        rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()]
    except OSError as e:
        res["runs"][k] = {"error": str(e)}
        continue
    if not rows:
        res["runs"][k] = {"error": f"no generation finished: see train_k{k}.log"}
        continue
    # generation g (g >= 1) takes from the end of evaluation g-1 to the end of evaluation g
    gen = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(rows, rows[1:])][-measured:]
    res["runs"][k] = {"generation_s": [round(x, 3) for x in gen], "median_generation_s": statistics.median(gen) if gen else None,
                      "evaluation_s": [round(r["generation_s"], 3) for r in rows][-measured:],
                      "warmup_generation_s": round(rows[0]["generation_s"], 2), "env_steps_per_s": [round(r["env_steps_per_s"]) for r in rows][-measured:],
                      "best_return": [r["best_return"] for r in rows], "mean_return": [r["mean_return"] for r in rows]}
    ck = sorted((d / "checkpoints").glob("gen_*.pt"))
    if ck:
        final[k] = torch.load(ck[-1], map_location="cpu", weights_only=False)
one = res["runs"].get(1, {})
for k, r in res["runs"].items():
    if k == 1 or not r.get("median_generation_s") or not one.get("median_generation_s"):
        continue
    res["speedup"][k] = round(one["median_generation_s"] / r["median_generation_s"], 3)
    same_pop = 1 in final and k in final and all(torch.equal(final[1]["population"][n], final[k]["population"][n])
                                                  for n in ("kind", "code", "out", "value", "size"))
    diff = next((g for g, (a, b) in enumerate(zip(one["best_return"], r["best_return"])) if a != b), None)
    res["identical"][k] = {"final_population": same_pop, "returns": diff is None and one["mean_return"] == r["mean_return"],
                           "first_generation_with_other_best_return": diff}
(out / "result.json").write_text(json.dumps(res, indent=1))
print(json.dumps(res))
PY
