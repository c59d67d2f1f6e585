"""Evolve an interpretable policy: ``python train.py env=hopper`` (Hydra app; see configs/ and gprl.trainer)."""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from gprl.config import register

register()  # typed schema: Hydra rejects wrong override types


@hydra.main(version_base="1.3", config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    from gprl.trainer import run

    try:
        run(cfg, HydraConfig.get().runtime.output_dir)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        # bad input: one clear line instead of a traceback (HYDRA_FULL_ERROR=1 still shows it)
        import os

        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
