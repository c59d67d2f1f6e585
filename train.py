"""Evolve an interpretable policy: ``python train.py env=hopper`` (Hydra app; see configs/ and gprl.trainer)."""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    from gprl.trainer import run

    run(cfg, HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    main()
