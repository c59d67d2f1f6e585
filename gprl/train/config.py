"""Typed schema of the training configuration (Hydra structured configs), so that a wrong override type is
rejected by Hydra itself (``gp.max_len=abc`` → "could not be converted to Integer") before anything runs.

The values live in ``configs/``; this module only fixes names and types. ``register()`` stores the schemas
in Hydra's ConfigStore; ``configs/config.yaml`` extends ``train_schema``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any, Optional

from omegaconf import MISSING

from gprl.evolve.config import hydra_fields


@dataclass
class EnvSchema:
    name: str = MISSING
    backend: str = "auto"
    episode_length: int | None = None
    # {start, ramp_generations} or null (Any: OmegaConf cannot merge a dict into a None dict)
    episode_schedule: Any = None
    racing: Any = None  # {horizon, finalists, episodes} or null
    episodes: int = 1
    reward_shift: float | None = None  # subtracted from every step's reward in training; null: 0
    normalize_obs: bool | None = True  # null: per-backend default, else true
    action_transform: str = "auto"
    kwargs: Any = None
    train_kwargs: Any = None  # the training environments' alone, over kwargs (validation and export: kwargs)
    per_backend: dict[str, Any] = field(default_factory=dict)


# the gp group: the stopping rules, then every GPConfig setting (population_size null: the env's default)
GPSchema = make_dataclass("GPSchema", [
    ("population_size", Optional[int], field(default=None)),  # noqa: UP045 - OmegaConf's form
    ("generations", Optional[int], field(default=None)),  # noqa: UP045
    ("time_limit", Optional[float], field(default=None)),  # noqa: UP045
    ("target_return", Optional[float], field(default=None)),  # noqa: UP045
    ("restarts", Optional[int], field(default=None)),  # noqa: UP045
    ("draws", Optional[int], field(default=None)),  # noqa: UP045
    ("draw_generations", Optional[int], field(default=None)),  # noqa: UP045
    *((name, kind, value) for name, kind, value in hydra_fields() if name != "population_size"),
])


@dataclass
class TaskSchema:
    name: str = "policy"
    hall_of_fame: int = 8                  # policy
    validation_episodes: int | None = None  # policy
    final_candidates: int | None = None     # policy: the last generation's best, validated too; null: 0
    validation_keep: Any = None             # policy: the share validated again; false or null: one round
    refine: Any = None                      # policy: {share, iterations, pairs, top, sigma, step} or false
    simplify: Any = None                    # policy: the share a tree simplified by evaluation may give up
    digits: int = 4
    metric: str | None = None              # sr / classification: the training loss
    model_selection: str | None = None     # sr / classification: the rule on the Pareto front
    standardize: bool = False              # sr / classification: z-score the features
    linear_scaling: Any = "auto"           # sr: auto | true | false


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
