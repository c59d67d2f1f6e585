#!/usr/bin/env bash
# On the lent GPU machine (offline): `python train.py env=hopper` on Brax with a wall-clock budget, then the
# exported policy replayed on 10 fresh Brax episodes. Results go to $OUT (default ./gpu_out): train.log,
# metrics.jsonl, curve.csv (wall clock vs best return), summary.json, policy.txt, replay.json, report.txt
# (<= 8 files). Stays under 9 minutes: TIME_LIMIT (s of evolution, default 330) + build + JIT + replay.
# Usage: [TIME_LIMIT=330] bash scripts/gpu_train_check.sh [extra Hydra overrides]
#   e.g. gp.population_size=8192  'env.episode_schedule={start: 100, ramp_generations: 20}'
#        'env.kwargs={pipeline: spring}'  task.validation_episodes=64
# The Brax defaults (configs/env/hopper.yaml, per_backend.brax) are 16,384 trees, episodes 100 -> 1,000 steps
# over 30 generations, 480 s of evolution, validation filling the training batch; TIME_LIMIT=480 is the full
# 600 s target run (needs the kernel cache warm: GPRL_CACHE defaults to .gprl_cache/ in the checkout, which survives
# between calls on a warm machine, so build it first, e.g. with gpu_check.sh).
#
# Wheels (.whl/, see ../shared/GPU.md) must include, besides the simulator set, the training app's pure-Python
# dependencies: hydra-core==1.3.8 omegaconf==2.3.1 pyyaml (cp312) tqdm and antlr4-python3-runtime==4.9.3
# (sdist only on PyPI: build it with `python3 -m pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3`).
set -uo pipefail
OUT=${OUT:-gpu_out}; mkdir -p "$OUT"
TIME_LIMIT=${TIME_LIMIT:-330}
RUN=${RUN:-/tmp/gprl_gpu_run}  # outside $OUT: only the files listed above come back
rm -rf "$RUN"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} GPRL_CACHE=${GPRL_CACHE:-$PWD/.gprl_cache}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false WANDB_MODE=disabled
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >"$OUT/report.txt" 2>&1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$OUT/report.txt" 2>&1
nvidia-smi -L | tee -a "$OUT/report.txt"
python3 -c "import hydra, omegaconf, tqdm" 2>>"$OUT/report.txt" || {
  echo "missing hydra-core/omegaconf/tqdm: add their wheels to .whl/ (see the header of this script)" | tee -a "$OUT/report.txt"
  exit 1; }
start=$(date +%s)
python3 -c "import gprl.ops, gprl._build as b; print('cuda kernels:', b.has_cuda_kernels())" 2>&1 | tee -a "$OUT/report.txt"
echo "kernel build seconds: $(( $(date +%s) - start ))" | tee -a "$OUT/report.txt"

# The clock of the 600 s target starts here: JAX compilation, evolution, validation and export included.
t0=$(date +%s)
# a copy of the metrics every 15 s, so a run cut short by the call's time limit still reports its curve
( while sleep 15; do cp "$RUN/metrics.jsonl" "$OUT/metrics.jsonl" 2>/dev/null; done ) &
copier=$!
timeout $(( TIME_LIMIT + 150 )) python3 train.py env=hopper env.backend=brax wandb.mode=disabled progress=false \
  gp.time_limit="$TIME_LIMIT" hydra.run.dir="$RUN" "$@" >"$OUT/train.log" 2>&1
status=$?
kill $copier 2>/dev/null
echo "train.py exit $status after $(( $(date +%s) - t0 )) s (wall clock incl. compilation)" | tee -a "$OUT/report.txt"
timeout 150 python3 scripts/replay.py "$RUN" --backend brax --episodes 10 > "$OUT/replay.json" 2>>"$OUT/train.log"
echo "replay exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$OUT/report.txt"
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
