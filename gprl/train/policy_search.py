"""A policy search from Python: the search of ``python train.py env=<name>`` for an environment given by name
or as an object (a Gymnasium environment class or factory, a Brax environment object), returning the exported
policy.

    policy = gprl.evolve_policy("Pendulum-v1", time_limit=60)
    policy = gprl.evolve_policy(MyEnv, time_limit=60, episode_length=200)   # a gymnasium.Env subclass
    policy.act(obs), policy.formulas, policy.save("my_policy/")
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from gprl import envs
from gprl.rl.export import ExportedPolicy


def _override(key: str, value: Any) -> str:
    # JSON is valid Hydra override syntax for numbers, booleans, lists and mappings; strings go quoted
    return f"{key}={json.dumps(value) if not isinstance(value, str) else repr(value)}"


def evolve_policy(env: Any, *, time_limit: float | None = None, generations: int | None = None,
                  population_size: int | None = None, episode_length: int | None = None, seed: int = 0,
                  backend: str = "auto", run_dir: str | Path | None = None, wandb: str = "disabled",
                  progress: bool = False, overrides: dict[str, Any] | None = None) -> ExportedPolicy:
    """Evolves a policy for ``env`` with ``train.py``'s defaults and returns its export.

    Args:
        env: a task name (as ``train.py env=``), a Gymnasium environment class or a factory returning one,
            or a Brax environment object.
        time_limit, generations, population_size: the budget and population (None: the backend's defaults).
        episode_length: steps of an episode (None: the environment's own limit; required where it has none).
        seed, backend: as ``train.py seed=`` and ``env.backend=``.
        run_dir: where the run writes (config, metrics, checkpoints, the export); None: a new temporary
            folder.
        wandb: ``"disabled"``, ``"offline"`` or ``"online"``.
        overrides: further settings by their ``train.py`` keys, e.g. ``{"gp.max_len": 32}``
            (``docs/options.md``).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from gprl.train.config import configs_folder, register
    from gprl.train.trainer import run

    settings = {"seed": seed, "env.backend": backend, "wandb.mode": wandb, "progress": progress,
                "gp.time_limit": time_limit, "gp.generations": generations,
                "gp.population_size": population_size, "env.episode_length": episode_length,
                **(overrides or {})}
    args = [f"env={envs.register(env)}"] + [_override(k, v) for k, v in settings.items() if v is not None]
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=configs_folder(), version_base=None):
        cfg = compose("config", overrides=args)
    folder = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="gprl-policy-"))
    run(OmegaConf.to_container(cfg, resolve=True), folder)
    return ExportedPolicy(folder)
