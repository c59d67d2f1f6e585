#!/usr/bin/env bash
# Policy search on a GPU: `python train.py env=hopper` on Brax with a wall-clock budget, then the exported
# policy replayed on 10 fresh Brax episodes (scripts/replay.py).
#
# Usage: [TIME_LIMIT=330] [ENV=hopper] [REPLAY=1] bash scripts/dev/gpu_train_check.sh [--wheels DIR] [--out DIR]
#                         [extra Hydra overrides]
#   e.g. gp.population_size=8192  'env.episode_schedule={start: 100, ramp_generations: 20}'
#        'env.kwargs={pipeline: spring}'  task.validation_episodes=64
#   --wheels DIR  folder of wheels to install without network access into /tmp/site, put on PYTHONPATH (env
#                 WHEELS; default .whl/ when it holds any wheel). Besides the simulators (brax, mujoco, ...) it
#                 needs the training app's pure-Python dependencies: hydra-core==1.3.8 omegaconf==2.3.1 pyyaml
#                 tqdm and antlr4-python3-runtime==4.9.3 (an sdist on PyPI: build its wheel with
#                 `python3 -m pip wheel --no-deps -w DIR antlr4-python3-runtime==4.9.3`).
#   --out DIR     output folder (env OUT; default ./gpu_out)
# Writes to the output folder: report.txt (install, device, kernel build, times, first time the best return
# reached 1,209 / 1,524 / 1,722 (EvoGP's marks in results/README.md) / 2,000 / 2,700, validation and replay
# returns), train.log, metrics.jsonl (copied every 15 s while training), curve.csv (wall clock vs best return),
# summary.json, policy.txt and replay.json. The full run directory goes to RUN (default /tmp/gprl_gpu_run).
# Takes TIME_LIMIT seconds of evolution (default 330) plus the kernel build, JAX compilation, validation,
# export and replay. The Brax defaults (configs/env/hopper.yaml, per_backend.brax) are 16,384 trees, episodes
# 100 -> 1,000 steps over 30 generations, 480 s of evolution, validation filling the training batch;
# TIME_LIMIT=480 runs the config's own budget. The kernels build on first use into GPRL_CACHE (default
# .gprl_cache/ in the checkout), so a machine that built them before (e.g. with gpu_check.sh) starts sooner.
set -uo pipefail
source "$(dirname "$0")/gpu_common.sh"
gpu_args "$@"; set -- "${ARGS[@]}"
mkdir -p "$OUT"
TIME_LIMIT=${TIME_LIMIT:-330}
ENV=${ENV:-hopper}  # the task (configs/env/); REPLAY=0 skips the replay of the exported policy
REPLAY=${REPLAY:-1}
RUN=${RUN:-/tmp/gprl_gpu_run}  # the full run directory (checkpoints included), outside OUT
rm -rf "$RUN"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} GPRL_CACHE=${GPRL_CACHE:-$PWD/.gprl_cache}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false WANDB_MODE=disabled
gpu_install_wheels "$OUT/report.txt"
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$OUT/report.txt" 2>&1
nvidia-smi -L | tee -a "$OUT/report.txt"
python3 -c "import hydra, omegaconf, tqdm" 2>>"$OUT/report.txt" || {
  echo "missing hydra-core/omegaconf/tqdm: install them or put their wheels in $WHEELS (see the header of this script)" | tee -a "$OUT/report.txt"
  exit 1; }
gpu_build "$OUT/report.txt"

# Wall clock from here: JAX compilation, evolution, validation and export included.
t0=$(date +%s)
# a copy of the metrics every 15 s, so a run stopped from outside still leaves its curve in OUT
( while sleep 15; do cp "$RUN/metrics.jsonl" "$OUT/metrics.jsonl" 2>/dev/null; done ) &
copier=$!
timeout $(( TIME_LIMIT + 150 )) python3 train.py env="$ENV" env.backend=brax wandb.mode=disabled progress=false \
  gp.time_limit="$TIME_LIMIT" hydra.run.dir="$RUN" "$@" >"$OUT/train.log" 2>&1
status=$?
kill $copier 2>/dev/null
echo "train.py exit $status after $(( $(date +%s) - t0 )) s (wall clock incl. compilation)" | tee -a "$OUT/report.txt"
if [ "$REPLAY" = 1 ]; then
  timeout 150 python3 scripts/replay.py "$RUN" --backend brax --episodes 10 > "$OUT/replay.json" 2>>"$OUT/train.log"
  echo "replay exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/report.txt"
fi
tail -n 25 "$OUT/train.log"

python3 - "$OUT" "$RUN" <<'PY' 2>&1 | tee -a "$OUT/report.txt"
import json, pathlib, shutil, sys
out, run = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for name in ("metrics.jsonl", "summary.json", "policy.txt"):
    if (run / name).exists():
        shutil.copy(run / name, out / name)
rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").exists() else []
with open(out / "curve.csv", "w") as f:
    f.write("generation,elapsed_s,episode_length,best_return,best_so_far,mean_return,env_steps_per_s,generation_s\n")
    for r in rows:
        f.write(f"{r['generation']},{r['elapsed_s']:.1f},{r['episode_length']},{r['best_return']:.1f},"
                f"{r['best_so_far']:.1f},{r['mean_return']:.1f},{r['env_steps_per_s']:.0f},{r['generation_s']:.2f}\n")
for target in (1209, 1524, 1722, 2000, 2700):
    hit = next((r for r in rows if r["best_so_far"] >= target), None)
    print(f"first best_so_far >= {target}: " + (f"gen {hit['generation']} at {hit['elapsed_s']:.0f} s of evolution"
                                               if hit else "not reached"))
for r in rows[:: max(1, len(rows) // 25)]:
    print(f"gen {r['generation']:3d} t={r['elapsed_s']:6.1f}s L={r['episode_length']:4d} best={r['best_return']:8.1f} "
          f"so_far={r['best_so_far']:8.1f} mean={r['mean_return']:7.1f} {r['generation_s']:.2f}s/gen")
try:
    s = json.loads((run / "summary.json").read_text())
    print("validation (hall of fame, fresh episodes):", s.get("validation_return"), "stopped by", s.get("stopped_by"))
except Exception as e:
    print("no summary:", e)
try:
    print("replay, 10 fresh Brax episodes:", json.loads((out / "replay.json").read_text().splitlines()[-1])["mean_return"])
except Exception as e:
    print("replay unreadable:", e)
PY
