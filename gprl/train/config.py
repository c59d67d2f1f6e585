"""Typed schema of the training configuration (Hydra structured configs), so that a wrong override type is
rejected by Hydra itself (``gp.max_len=abc`` → "could not be converted to Integer") before anything runs.

The values live in ``configs/``; this module only fixes names and types. ``register()`` stores the schemas
in Hydra's ConfigStore; ``configs/config.yaml`` extends ``train_schema``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class EnvSchema:
    name: str = MISSING
    backend: str = "auto"
    episode_length: int | None = None
    episode_schedule: Any = None  # {start, ramp_generations} or null (Any: OmegaConf cannot merge a dict into a None dict)
    episodes: int = 1
    normalize_obs: bool = True
    action_transform: str = "auto"
    kwargs: Any = None
    per_backend: dict[str, Any] = field(default_factory=dict)


@dataclass
class GPSchema:
    population_size: int | None = None
    generations: int | None = None
    time_limit: float | None = None
    target_return: float | None = None
    max_len: int = 64
    init_method: str = "ramped"
    init_depth: list[int] = field(default_factory=lambda: [1, 4])
    max_depth: int = 8
    functions: list[str] = field(default_factory=list)
    selection: str = "tournament"
    tournament_size: int = 5
    elitism: int = 10
    parsimony: float = 0.0
    islands: int = 1
    migration_interval: int = 10
    migrants: int = 1
    rates: dict[str, float] = field(default_factory=dict)
    crossover_leaf_prob: float | None = 0.1
    subtree_depth: int = 4
    multi_prob: float = 0.1
    const_sigma: float = 0.1
    const_prob: float = 0.2
    const_range: list[float] = field(default_factory=lambda: [-1.0, 1.0])
    output_prob: float = 0.5


@dataclass
class TaskSchema:
    name: str = "policy"
    hall_of_fame: int = 8                  # policy
    validation_episodes: int | None = None  # policy
    digits: int = 4
    metric: str | None = None              # sr / classification: the training loss
    model_selection: str | None = None     # sr / classification: the rule on the Pareto front
    standardize: bool = False              # sr / classification: z-score the features


@dataclass
class DatasetSchema:
    """sr / classification data: a ``gprl.datasets`` name, or ``csv`` with path/target/columns."""

    name: str | None = None
    n_samples: int = 10_000
    test_size: float = 0.25
    seed: int = 0
    noise: float = 0.0
    path: str | None = None
    target: Any = None   # a column name or index
    columns: Any = None  # a list of column names/indices or null


@dataclass
class WandbSchema:
    mode: str = "offline"
    project: str = "gprl"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    name: str | None = None


@dataclass
class DistSchema:
    """torchrun runs (gprl/train/distributed.py); ignored by a single process."""

    backend: str = "auto"      # auto | nccl | gloo
    timeout_s: float = 300.0   # the longest a collective waits for a dead or stuck rank
    shard: str = "population"  # population | data (sr/classification only)


@dataclass
class TrainSchema:
    task: TaskSchema = field(default_factory=TaskSchema)
    env: EnvSchema = field(default_factory=EnvSchema)
    dataset: DatasetSchema = field(default_factory=DatasetSchema)
    gp: GPSchema = field(default_factory=GPSchema)
    wandb: WandbSchema = field(default_factory=WandbSchema)
    dist: DistSchema = field(default_factory=DistSchema)
    seed: int = 0
    device: str = "auto"
    threads: Any = "auto"
    resume: str | None = None
    resume_allow_changes: bool = False  # resume with changed search settings on purpose (recorded in the run)
    checkpoint_every: int = 5
    keep_checkpoints: int = 2
    progress: bool = True


def register() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="train_schema", node=TrainSchema)
