#!/usr/bin/env bash
# Genesis on a GPU machine without network access: the Genesis GPU test and scripts/bench_envs.py
# --backends genesis (and, on request, scripts/dev/profile_genesis_step.py).
#
#   bash scripts/dev/gpu_genesis_check.sh pack                          # with network access: pack Genesis' stack
#   bash scripts/dev/gpu_genesis_check.sh stash                         # optional, on the GPU machine
#   bash scripts/dev/gpu_genesis_check.sh run [--out DIR] [sizes...]    # on the GPU machine: unpack, test, benchmark
#
# `pack` downloads genesis-world 1.4.5 and its dependencies as CPython 3.12 manylinux wheels (~290 MB), unpacks
# them into one site tree and writes it as an xz tarball (~106 MB) in two parts of at most 56 MB: .gsa/ (part
# aa) and .gsb/ (part ab, with the GL loader libraries, as Debian packages, that Genesis' imports need and a
# minimal CUDA image may lack). It leaves out gs_madrona (Genesis imports it only if present) and the example
# assets our tasks do not load (meshes, MJCF models, robots other than go2; the ground plane is kept).
# `stash` copies .gsa/ to /tmp/gs_stash/, where `run` also looks for part aa (for when .gsa/ and .gsb/ reach the
# machine one after the other).
# `run` unpacks the parts (.gsa/ or /tmp/gs_stash/, and .gsb/) into /tmp/site once and puts it on PYTHONPATH,
# installs the GL libraries and gprl (editable, no network), imports pyglet headless, then runs
# `pytest -m gpu tests/envs/test_genesis.py` and bench_envs.py at the given sizes (default: bench_envs.py's).
# Output folder (--out DIR or env OUT; default ./gpu_out): build.log, gpu_tests_genesis.log,
# bench_envs_genesis.json, bench_genesis.err, profile_genesis_step_<N>.json/.err and qdcache.tar.xz.
# Environment for `run`: SKIP_TESTS=1 (no GPU test), PROFILE_SIZES="1024 ..."
# (scripts/dev/profile_genesis_step.py at those sizes, before the benchmark; PROFILE_ARGS: its further
# options), SKIP_BENCH=1 (no benchmark), BENCH_ARGS (bench_envs.py's further options), BENCH_TIMEOUT
# (seconds, default 400).
#
# Most of a fresh machine's first Genesis scene goes into compiling Genesis' kernels (4.5-5.5 min on an H100).
# `run` leaves that compile cache in the output folder (qdcache.tar.xz, ~1 MB); put it in .gsc/ and the next
# `run` on a fresh machine starts from it.
set -uo pipefail
PY=3.12
WHEELS="genesis-world==1.4.5 quadrants==1.3.3 mujoco==3.17.0 DracoPy OpenEXR PyGEL3D PyOpenGL av coacd
  dataclasses-json marshmallow fast_simplification freetype-py frozendict glfw libigl orjson pycollada pydantic
  pydantic_core annotated-types typing-inspection pyglet pygltflib rtree tetgen trimesh xacro z3-solver zstandard
  dill cffi pycparser"
case "${1:-}" in
  pack)
    work=$(mktemp -d)
    platforms=""
    for p in manylinux_2_{17,24,27,28,31,34,35}_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
      platforms+=" --platform $p"
    done
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version $PY --implementation cp \
      $platforms -d "$work/whl" $WHEELS || exit 1
    mkdir "$work/site"
    for w in "$work"/whl/*.whl; do unzip -q -o "$w" -d "$work/site"; done
    assets="$work/site/genesis/assets"
    rm -rf "$assets"/{meshes,xml,textures}
    find "$assets/urdf" -mindepth 1 -maxdepth 1 ! -name go2 ! -name plane -exec rm -rf {} +
    rm -rf .gsa .gsb && mkdir .gsa .gsb
    tar -C "$work/site" -cf - . | xz -9 -T0 | split -b 56M - .gsa/site.tar.xz.part-
    mv .gsa/site.tar.xz.part-ab .gsb/
    rm -rf "$work"
    apt_opts="-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/gs_apt_lists"
    mkdir -p /tmp/gs_apt_lists/partial
    # shellcheck disable=SC2086
    apt-get $apt_opts update -qq && (cd .gsb && apt-get $apt_opts download libgl1 libglx0 libglvnd0 libopengl0 \
      libegl1) || exit 1
    du -sh .gsa .gsb
    ;;
  stash)
    mkdir -p /tmp/gs_stash && cp .gsa/* /tmp/gs_stash/ && ls -la /tmp/gs_stash
    ;;
  run)
    shift
    source "$(dirname "$0")/gpu_common.sh"
    gpu_args "$@"; set -- "${ARGS[@]}"
    mkdir -p "$OUT" /tmp/site
    export PYTHONUNBUFFERED=1 GPRL_CACHE=${GPRL_CACHE:-$PWD/.gprl_cache}
    if [ ! -f /tmp/site/.unpacked ]; then
      declare -A part=()  # part name -> file; .gsa/ and /tmp/gs_stash/ hold the same part aa
      for f in /tmp/gs_stash/site.tar.xz.part-* .gsa/site.tar.xz.part-* .gsb/site.tar.xz.part-*; do
        [ -f "$f" ] && part[$(basename "$f")]=$f
      done
      [ ${#part[@]} -gt 0 ] || { echo "no packed Genesis stack in .gsa/, /tmp/gs_stash/ or .gsb/: run 'pack' first"; exit 1; }
      for name in $(printf '%s\n' "${!part[@]}" | sort); do cat "${part[$name]}"; done | xz -d | tar -C /tmp/site -xf - \
        && touch /tmp/site/.unpacked || { echo "unpack failed"; exit 1; }
    fi
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYGLET_HEADLESS=1 PYOPENGL_PLATFORM=egl
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    for deb in .gsb/*.deb; do dpkg -x "$deb" /; done && ldconfig
    if [ -f .gsc/qdcache.tar.xz ] && [ ! -d "$HOME/.cache/quadrants" ]; then  # Genesis' compiled kernels
      mkdir -p "$HOME/.cache" && tar -C "$HOME/.cache" -xJf .gsc/qdcache.tar.xz && echo "kernel cache restored"
    fi
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >"$OUT/build.log" 2>&1
    nvidia-smi -L | tee -a "$OUT/build.log"
    if [ -z "${SKIP_TESTS:-}" ]; then
      timeout 400 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/envs/test_genesis.py 2>&1 \
        | tee "$OUT/gpu_tests_genesis.log" | tail -n 15
    fi
    for n in ${PROFILE_SIZES:-}; do  # where the step's time goes (scripts/dev/profile_genesis_step.py)
      # shellcheck disable=SC2086
      timeout 400 python3 scripts/dev/profile_genesis_step.py --num-envs "$n" --trace ${PROFILE_ARGS:-} \
        > "$OUT/profile_genesis_step_$n.json" 2> "$OUT/profile_genesis_step_$n.err"
      tail -c 1500 "$OUT/profile_genesis_step_$n.json"; echo
    done
    if [ -z "${SKIP_BENCH:-}" ]; then
      # shellcheck disable=SC2086
      timeout "${BENCH_TIMEOUT:-400}" python3 scripts/bench_envs.py --backends genesis --device cuda \
        ${1:+--sizes "$@"} ${BENCH_ARGS:-} > "$OUT/bench_envs_genesis.json" 2> "$OUT/bench_genesis.err"
      grep '^{"backend"' "$OUT/bench_envs_genesis.json" | python3 -c '
import json, sys
keys = ("num_envs", "steps", "steps_per_s", "raw_steps_per_s", "overhead_pct", "overhead_vs_scene_step_pct",
        "ours_eager_overhead_pct",
        "ours_host_us_per_step", "ours_synced_us_per_step", "raw_host_us_per_step", "raw_synced_us_per_step", "error")
for line in sys.stdin:
    rec = json.loads(line)
    print({k: rec[k] for k in keys if k in rec})'
      tail -n 5 "$OUT/bench_genesis.err"
    fi
    if [ -d "$HOME/.cache/quadrants" ]; then
      tar -C "$HOME/.cache" -cf - quadrants | xz -T0 -6 > "$OUT/qdcache.tar.xz" && ls -la "$OUT/qdcache.tar.xz"
    fi
    ;;
  *)
    echo "usage: $0 pack | stash | run [--out DIR] [sizes...]" >&2; exit 2
    ;;
esac
