"""Evolve an interpretable policy: ``python train.py env=hopper`` (Hydra app; see configs/ and gprl.trainer).

Several processes, one search: ``torchrun --nproc_per_node=K train.py ...`` (gprl.distributed)."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from gprl.config import register

register()  # typed schema: Hydra rejects wrong override types


def _scratch_output_for_other_ranks() -> None:
    """Under torchrun only rank 0 owns the run directory: the other ranks' Hydra output (its folder, .hydra/,
    the log) goes to a scratch folder that is removed at exit."""
    rank = os.environ.get("RANK", "0")
    if rank in ("", "0") or int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return
    scratch = tempfile.mkdtemp(prefix=f"gprl-rank{rank}-")
    atexit.register(shutil.rmtree, scratch, True)
    keep = [a for a in sys.argv[1:] if not a.lstrip("+").startswith(
        ("hydra.run.dir=", "hydra.sweep.dir=", "hydra.output_subdir="))]
    sys.argv[1:] = [*keep, f"hydra.run.dir={scratch}", f"hydra.sweep.dir={scratch}", "hydra.output_subdir=null"]


@hydra.main(version_base="1.3", config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    from gprl.distributed import DistributedError
    from gprl.trainer import run

    try:
        run(cfg, HydraConfig.get().runtime.output_dir)
    except (ValueError, TypeError, FileNotFoundError, ImportError, DistributedError) as err:
        # bad input: one clear line instead of a traceback (HYDRA_FULL_ERROR=1 still shows it)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        rank = f" (rank {os.environ['RANK']})" if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 else ""
        raise SystemExit(f"error{rank}: {err}") from None


if __name__ == "__main__":
    _scratch_output_for_other_ranks()
    main()
