#!/usr/bin/env bash
# GPU check of the environment adapters, for an offline H100 machine (python3.12, torch CUDA, JAX CUDA
# preinstalled). Run from the repository root with the simulator wheels in .whl/ (see shared/GPU.md);
# logs go to "$OUT" (default ./outputs/gpu_envs). Budget: about 4 minutes.
set -uo pipefail
OUT="${OUT:-outputs/gpu_envs}"
mkdir -p "$OUT"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD
# gprl.envs is the top-level envs/ folder: expose it as gprl.envs without installing the package
mkdir -p /tmp/gprl_pkg/gprl
[ -f /tmp/gprl_pkg/gprl/__init__.py ] || : >/tmp/gprl_pkg/gprl/__init__.py
ln -sfn "$PWD/envs" /tmp/gprl_pkg/gprl/envs
export PYTHONPATH=/tmp/gprl_pkg:$PYTHONPATH
{
  nvidia-smi --query-gpu=name,memory.total --format=csv
  python3 -c "import torch, jax; print('torch', torch.__version__, torch.cuda.is_available()); print('jax', jax.__version__, jax.devices())"
} >"$OUT/env.log" 2>&1
rc=0
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_envs*.py >"$OUT/pytest_gpu.log" 2>&1 || rc=$?
cp /tmp/gprl_brax_step_trace.json "$OUT/" 2>/dev/null || true
timeout 110 python3 scripts/bench_envs.py --backends brax --device cuda --sizes 1 1024 32768 --steps 20 \
  >"$OUT/bench_brax.json" 2>"$OUT/bench_brax.err" || rc=$?
tail -n 3 "$OUT/pytest_gpu.log"
grep '^{"backend' "$OUT/bench_brax.json" || tail -n 20 "$OUT/bench_brax.err"
exit $rc
