# Sourced by the gpu_*.sh scripts: the arguments and set-up steps they share.

# gpu_args "$@": --out DIR (env OUT, default ./gpu_out) and --wheels DIR (env WHEELS, default .whl) are read and
# the output folder made; the remaining arguments are left in ARGS.
gpu_args() {
  OUT=${OUT:-gpu_out}; WHEELS=${WHEELS:-.whl}; ARGS=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --out) OUT=${2:?--out needs a folder}; shift 2 ;;
      --out=*) OUT=${1#--out=}; shift ;;
      --wheels) WHEELS=${2:?--wheels needs a folder}; shift 2 ;;
      --wheels=*) WHEELS=${1#--wheels=}; shift ;;
      *) ARGS=("$@"); break ;;
    esac
  done
  mkdir -p "$OUT"
}

# gpu_install_wheels LOG: the wheels in $WHEELS (if any) go to /tmp/site, which joins PYTHONPATH (no network).
gpu_install_wheels() {
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    local start
    start=$(date +%s)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/*.whl >>"$1" 2>&1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    echo "wheel install seconds: $(( $(date +%s) - start ))" >>"$1"
  fi
}

# gpu_build LOG: the one-time kernel build, timed.
gpu_build() {
  local start
  start=$(date +%s)
  python3 -c "import gprl.backend.ops, gprl.backend.build as b; print('cuda kernels:', b.has_cuda_kernels())" 2>&1 \
    | tee -a "$1"
  echo "kernel build seconds: $(( $(date +%s) - start ))" | tee -a "$1"
}
