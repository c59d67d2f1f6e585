"""Compiles the custom ops in kernels/ on first use and loads them into ``torch.ops.gprl``.

The build is keyed by a hash of the sources, the torch build and the compile flags, and cached under
``$GPRL_CACHE`` (default ``~/.cache/gprl``), so it happens once per machine and source version.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

_loaded = False
_has_cuda_kernels = False
_build_id = ""

# -fno-math-errno and -fno-trapping-math change no value (NaN, inf and signed zeros stay exact, unlike
# -ffast-math): they only drop errno and floating-point exception flags, which nothing reads, and so let the
# row loops of the protected functions (a select around a division, sqrt) vectorise. -ffp-contract=off: the
# CPU row loops are compiled for several x86-64 levels (kernels/eval_cpu.cpp); without fused multiply-adds
# every level computes the same bits (~15% slower trig than with them).
CXX_FLAGS = ["-O3", "-std=c++17", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off"]
NVCC_FLAGS = ["-O3", "-std=c++17", "--expt-relaxed-constexpr"]


def openmp_flags() -> list[str]:
    """``-fopenmp`` where torch's intra-op threads are OpenMP (libgomp, Linux) and the compiler is GCC.

    at::parallel_for is a header template: compiled without OpenMP it runs the whole range on the calling
    thread, so the CPU kernels would ignore torch.set_num_threads. With -fopenmp its regions run on the
    libgomp that torch has loaded already (same soname), i.e. on torch's own thread pool."""
    if sys.platform != "linux" or "OpenMP" not in torch.__config__.parallel_info():
        return []
    try:
        version = subprocess.run([os.environ.get("CXX", "c++"), "--version"], check=False,
                                 capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return ["-fopenmp"] if "Free Software Foundation" in version else []


def kernel_dir() -> Path:
    """kernels/ beside gprl/ in a source checkout, else the installed gprl.kernels package."""
    sibling = Path(__file__).resolve().parents[2] / "kernels"
    if (sibling / "nodes.h").exists():
        return sibling
    return Path(str(importlib.resources.files("gprl.kernels")))


def _cuda_toolkit() -> str | None:
    """The CUDA toolkit's nvcc if torch is a CUDA build and a GPU is present, else None."""
    if torch.version.cuda is None or not torch.cuda.is_available():
        return None
    from torch.utils.cpp_extension import CUDA_HOME

    nvcc = shutil.which("nvcc") or (CUDA_HOME and os.path.join(CUDA_HOME, "bin", "nvcc"))
    if not nvcc or not os.path.exists(nvcc):
        print(
            f"gprl: torch {torch.__version__} has CUDA {torch.version.cuda} but no CUDA compiler (nvcc) "
            f"was found, so only the CPU kernels are built. Install the CUDA toolkit {torch.version.cuda} "
            f"(e.g. `pip install nvidia-cuda-nvcc-cu{torch.version.cuda.split('.')[0]}` or your "
            "distribution's cuda-toolkit) and set CUDA_HOME to it.",
            file=sys.stderr,
        )
        return None
    return nvcc


def cache_dir() -> Path:
    """Where compiled kernels (and the strategy calibration, gprl/backend/strategy.py) are kept."""
    return Path(os.environ.get("GPRL_CACHE", Path.home() / ".cache" / "gprl"))


def load() -> None:
    """Builds (first time only) and loads the kernels; safe to call repeatedly."""
    global _loaded, _has_cuda_kernels, _build_id
    if _loaded:
        return
    src = kernel_dir()
    use_cuda = _cuda_toolkit() is not None
    sources = sorted(src.glob("*.cpp")) + (sorted(src.glob("*.cu")) if use_cuda else [])
    digest = hashlib.sha256()
    for f in sorted(src.glob("*.h")) + sources:
        digest.update(f.name.encode() + f.read_bytes())
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "") if use_cuda else ""
    omp = openmp_flags()
    digest.update(f"{torch.__version__}|{sys.version_info[:2]}|{CXX_FLAGS}|{omp}|{NVCC_FLAGS}|{arch}".encode())
    name = f"gprl_ops_{digest.hexdigest()[:16]}"
    build_dir = cache_dir() / name
    library = build_dir / f"{name}.so"
    if not library.exists():
        build_dir.mkdir(parents=True, exist_ok=True)
        what = "CPU + CUDA" if use_cuda else "CPU"
        print(f"gprl: compiling {what} kernels once into {build_dir} (about a minute)", file=sys.stderr,
              flush=True)
        if "distutils" in sys.modules and "setuptools" not in sys.modules:
            # setuptools (under cpp_extension) refuses to load once the standard library's distutils is in
            # (some simulators' dependencies import it); tell it to use that one
            os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")
        from torch.utils.cpp_extension import load as cpp_load

        try:
            cpp_load(
                name=name,
                sources=[str(s) for s in sources],
                extra_cflags=CXX_FLAGS + omp,
                extra_ldflags=omp,
                extra_cuda_cflags=NVCC_FLAGS,
                extra_include_paths=[str(src)],
                build_directory=str(build_dir),
                is_python_module=False,
                with_cuda=use_cuda,
                verbose=False,
            )
        except Exception as e:  # compiler missing or failing: one message that says what to do
            raise RuntimeError(
                f"gprl: building the kernels failed ({e}). A C++17 compiler (g++ or clang++) is needed; "
                "see the build log above."
            ) from e
    else:
        torch.ops.load_library(str(library))
    _loaded, _has_cuda_kernels, _build_id = True, use_cuda, name


def has_cuda_kernels() -> bool:
    load()
    return _has_cuda_kernels


def build_id() -> str:
    """Names the loaded kernels: a hash of their sources, the torch build and the compile flags."""
    load()
    return _build_id
