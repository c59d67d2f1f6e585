"""Typed schema of the training configuration (Hydra structured configs), so that a wrong override type is
rejected by Hydra itself (``gp.max_len=abc`` → "could not be converted to Integer") before anything runs.

The values live in ``configs/``; this module only fixes names and types. ``register()`` stores the schemas
in Hydra's ConfigStore; ``configs/config.yaml`` extends ``train_schema``.
"""

from __future__ import annotations

import ast
import importlib.resources
import inspect
import textwrap
import types
from dataclasses import MISSING as dataclass_missing
from dataclasses import dataclass, field, fields, make_dataclass
from itertools import pairwise
from typing import Any, Optional, Union, get_args, get_origin, get_type_hints

from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from omegaconf import MISSING, OmegaConf

from gprl.evolve.config import GPConfig, hydra_fields


@dataclass
class EnvSchema:
    name: str = MISSING
    """The task: a preset of ``configs/env/``, a Gymnasium id, an entry point ``module:Class`` of your own
    environment, or a Brax, Playground or Genesis name."""
    backend: str = "auto"
    """``auto`` (Brax with a GPU JAX, native MuJoCo otherwise; ``classic`` for Gymnasium's classic-control
    ids), ``mujoco``, ``classic`` (CartPole, Pendulum, MountainCar, Acrobot batched in NumPy, bit for bit
    Gymnasium's), ``gymnasium``, ``brax``, ``genesis``."""
    episode_length: int | None = None
    """Steps of a full (validation) episode."""
    # Any: OmegaConf cannot merge a dict into a None dict
    episode_schedule: Any = None
    """``{start, ramp_generations}``: training episodes grow from ``start`` steps to the full length;
    null: the backend's default."""
    racing: Any = None
    """``{horizon, finalists, episodes}``: every tree plays the first ``horizon`` share of the episode, the
    best ``finalists`` share whole ones; ``{horizon: 1}``: off; null: the backend's default."""
    episodes: int | None = None
    """Episodes per tree per generation, every tree on the same starts (not on Genesis); null: as many as
    keep a generation's full-length episodes within 2^18 steps (a power of two, at most 8)."""
    reward_shift: float | None = None
    """Subtracted from every live step's reward in training only (1 takes out a survival bonus of 1 a step,
    -1 doubles it); null: the backend's default, else 0."""
    normalize_obs: bool | None = True
    """Observations scaled by a running mean and standard deviation, frozen within a generation and folded
    into the exported formulas; null: the backend's default, else true."""
    action_transform: str = "auto"
    """``auto`` (tanh for continuous actions, argmax for discrete), ``tanh``, ``clip`` or ``argmax``."""
    kwargs: Any = None
    """Keyword arguments of the environment itself (e.g. Gymnasium's ``ctrl_cost_weight``; Brax: ``pipeline``,
    ``compact``: ended episodes leave the simulated batch, default true); null: the backend's default."""
    train_kwargs: Any = None
    """Over ``kwargs`` for the training environments alone (validation and export play ``kwargs``)."""
    per_backend: dict[str, Any] = field(default_factory=dict)
    """Defaults for the null entries of ``env``, ``gp`` and ``task``, by resolved backend."""


@dataclass
class StoppingRules:
    """The ``gp`` group's settings beyond :class:`~gprl.evolve.config.GPConfig`'s: when the search ends."""

    population_size: Optional[int] = None  # noqa: UP045 - OmegaConf's form
    """Trees per generation; null: the task's default."""
    generations: Optional[int] = None  # noqa: UP045
    """Stop after this many generations; null: no limit."""
    time_limit: Optional[float] = None  # noqa: UP045
    """Seconds of evolution and refinement; validation and export come after; null: no limit."""
    target_return: Optional[float] = None  # noqa: UP045
    """Stop once a training return reaches this."""
    draws: Optional[int] = None  # noqa: UP045
    """Fresh random populations, each evolved ``draw_generations`` on its own; the best goes on, the others'
    best trees stay in the hall of fame; null: the backend's default, else one population."""
    draw_generations: Optional[int] = None  # noqa: UP045
    """Generations of each draw (see ``draws``)."""


# the gp group: the stopping rules, then every other GPConfig setting
GPSchema = make_dataclass("GPSchema", [
    *((f.name, kind, field(default=f.default)) for f, kind in zip(fields(StoppingRules),
                                                                   get_type_hints(StoppingRules).values())),
    *((name, kind, value) for name, kind, value in hydra_fields() if name != "population_size"),
])


@dataclass
class TaskSchema:
    name: str = "policy"
    """``policy``, ``sr`` or ``classification`` (``task=...`` picks the group's file)."""
    hall_of_fame: int = 8
    """policy: the best tree of this many recent generations, validated at the end."""
    validation_episodes: int | None = None
    """policy: fresh full-length episodes per validated candidate; 0: fill the training batch; null: the
    backend's default."""
    final_candidates: int | None = None
    """policy: the last generation's best trees, validated beside the hall of fame; null: the backend's
    default, else 0."""
    validation_keep: Any = None
    """policy: a share in (0, 1): the best share of the candidates plays a second round of as many fresh
    episodes, which alone decides; false or null: one round."""
    refine: Any = None
    """policy: ``{share, pairs, top, sigma, step, iterations, target, episodes, prune, horizon}``: a
    linear feedback term on the validated best tree (``target: feedback``) or its constants and observation
    scaling (``target: constants``), tuned by random search in the last ``share`` of ``gp.time_limit``;
    false: off; null: the backend's default; a mapping is laid over the backend's (of the same target)."""
    simplify: Any = None
    """policy: a share s: the exported tree also simplified by evaluation and the shortest candidate within
    the share s of the best validated return exported; false: off; null: the backend's default, else 0.02."""
    digits: int = 4
    """Significant digits of the constants in the exported text and LaTeX."""
    per_backend: dict[str, Any] = field(default_factory=dict)
    """policy: defaults for the null entries of ``gp``, ``env`` and ``task`` by resolved backend, where the
    machine requires them (a batch the simulator steps efficiently); a preset's ``env.per_backend`` comes
    first."""
    metric: str | None = None
    """sr: ``mse``, ``mae`` or ``rmse``; classification: ``cross_entropy`` or ``accuracy``."""
    model_selection: str | None = None
    """sr / classification: ``best`` (PySR's score rule) or ``accuracy`` (lowest training loss) on the
    Pareto front."""
    standardize: bool = False
    """sr / classification: z-score the features (folded into the exported formulas)."""
    linear_scaling: Any = "auto"
    """sr: each output read as a + b * tree, a and b fitted by least squares; ``auto``: on for mse/rmse."""


@dataclass
class DatasetSchema:
    """sr / classification data: a ``gprl.datasets`` name, or ``csv`` with path/target/columns."""

    name: str | None = None
    """A ``gprl.datasets`` name (``configs/dataset/``) or ``csv``."""
    n_samples: int = 10_000
    """Rows generated (Feynman equations only)."""
    test_size: float = 0.25
    """Held-out fraction."""
    seed: int = 0
    """Data sampling and split (independent of the run's seed)."""
    noise: float = 0.0
    """Gaussian noise of noise * std(y) on regression targets."""
    path: str | None = None
    """csv: a .csv (or .npy/.npz: columns by index)."""
    target: Any = None
    """csv: the target column (name or index)."""
    columns: Any = None
    """csv: the input columns (names or indices); null: every other column."""


@dataclass
class WandbSchema:
    mode: str = "offline"
    """``online``, ``offline`` or ``disabled``."""
    project: str = "gprl"
    """W&B project."""
    entity: str | None = None
    """W&B entity (team or user); null: the login's default."""
    group: str | None = None
    """W&B run group."""
    tags: list[str] = field(default_factory=list)
    """W&B run tags."""
    name: str | None = None
    """W&B run name; null: W&B's own."""


@dataclass
class DistSchema:
    """torchrun runs (gprl/train/distributed.py); ignored by a single process."""

    backend: str = "auto"
    """``auto`` (gloo for CPU tensors, NCCL for CUDA tensors), ``nccl`` or ``gloo``."""
    timeout_s: float = 300.0
    """The longest a collective waits for a dead or stuck rank; then every rank fails."""
    shard: str = "population"
    """``population``: each rank scores a shard of the trees; ``data`` (sr / classification): all trees on a
    shard of the rows."""


@dataclass
class TrainSchema:
    task: TaskSchema = field(default_factory=TaskSchema)
    env: EnvSchema = field(default_factory=EnvSchema)
    dataset: DatasetSchema = field(default_factory=DatasetSchema)
    gp: GPSchema = field(default_factory=GPSchema)
    wandb: WandbSchema = field(default_factory=WandbSchema)
    dist: DistSchema = field(default_factory=DistSchema)
    seed: int = 0
    """Seeds the search, the environments and the validation episodes."""
    device: str = "auto"
    """``auto`` (the environment's device; sr / classification: CUDA when available), ``cpu``, ``cuda``."""
    threads: Any = "auto"
    """Torch CPU threads; ``auto``: 1 beside MuJoCo's own threads."""
    resume: str | None = None
    """A run directory to continue: the run's own command-line settings, then those given now (changed
    search settings are refused unless ``resume_allow_changes=true``)."""
    resume_allow_changes: bool = False
    """Resume with changed search settings on purpose (recorded in the run)."""
    checkpoint_every: int = 5
    """Generations between checkpoints."""
    keep_checkpoints: int = 2
    """Checkpoints kept."""
    progress: bool = True
    """A progress bar."""


class AnyEnvSource(ConfigSource):
    """A Hydra config source (``gprl-env://``, last on ``configs/config.yaml``'s search path) that answers
    ``env=<name>`` for any name without a preset in ``configs/env/``: ``{name: <name>}`` over the schema's
    defaults, so a Gymnasium id (``env=Pendulum-v1``, ``env=ALE/Pong-v5``), an entry point
    (``env=my_module:MyEnv``), a Brax, Playground or Genesis name is one token. Whether the name exists is
    the environment backends' to say (:func:`gprl.envs.make`: one line with close matches)."""

    def __init__(self, provider: str = "gprl", path: str = "gprl-env://") -> None:
        super().__init__(provider, path)

    @staticmethod
    def scheme() -> str:
        return "gprl-env"

    def _name(self, config_path: str) -> str | None:
        path = self._normalize_file_name(config_path)
        name = path[len("env/"):-len(".yaml")] if path.startswith("env/") else ""
        return name or None

    def load_config(self, config_path: str) -> ConfigResult:
        name = self._name(config_path)
        if name is None:
            raise ConfigLoadError(f"no config {config_path!r}")
        return ConfigResult(config=OmegaConf.create({"name": name}), path=self.full_path(),
                            provider=self.provider, header={"package": None})

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return config_path in ("", "env")

    def is_config(self, config_path: str) -> bool:
        return self._name(config_path) is not None

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        return []  # any name: nothing to list


def register() -> None:
    from hydra._internal.sources_registry import SourcesRegistry
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="train_schema", node=TrainSchema)
    SourcesRegistry.instance().register(AnyEnvSource)




# docs/options.md: one table per group, generated from the schema and the composed configs/
GROUPS = {"top level": TrainSchema, "env": EnvSchema, "gp": GPSchema, "task": TaskSchema,
          "dataset": DatasetSchema, "wandb": WandbSchema, "dist": DistSchema}
TASKS = ("policy", "sr", "classification")
REFERENCE_COMMAND = "python -m gprl.train.config > docs/options.md"


def configs_folder() -> str:
    """Where the config tree lies (``configs/``, shipped as ``gprl.configs``)."""
    return str(importlib.resources.files("gprl.configs"))


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass (the string literal right after each field), on one line."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    return {node.target.id: " ".join(after.value.value.split()) for node, after in pairwise(body)
            if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)}


def _docs(cls: type) -> dict[str, str]:
    return {**field_docs(GPConfig), **field_docs(StoppingRules)} if cls is GPSchema else field_docs(cls)


def _type_name(kind: Any) -> str:
    if kind is Any:
        return "any"
    args = get_args(kind)
    if get_origin(kind) in (Union, types.UnionType):
        named = [_type_name(a) for a in args if a is not type(None)]
        return " \\| ".join(named + (["null"] if type(None) in args else []))
    if args:
        return f"{get_origin(kind).__name__}[{', '.join(_type_name(a) for a in args)}]"
    return kind.__name__


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _composed(config_dir: str) -> dict[str, dict[str, Any]]:
    """``python train.py task=<task>``'s resolved config per task (the schema's defaults under the files)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return {t: OmegaConf.to_container(compose("config", overrides=[f"task={t}"]), resolve=False)
                for t in TASKS}


def options_reference(config_dir: str | None = None) -> str:
    """Every option of ``train.py``: its type, its default under ``python train.py`` (another task's default
    beside it where that differs) and its meaning (the schema's attribute docstrings)."""
    config_dir = config_dir or configs_folder()
    composed = _composed(config_dir)
    lines = ["# train.py options", "",
             f"Generated from `gprl/train/config.py` and `configs/` by `{REFERENCE_COMMAND}`;",
             "a test fails when they disagree. Set any option on the command line:",
             "`python train.py gp.population_size=2000`.",
             "`env` defaults are the schema's: a preset in `configs/env/` gives its task's values."]
    for group, cls in GROUPS.items():
        docs, hints = _docs(cls), get_type_hints(cls)
        lines += ["", f"## {group}", "", "| option | type | default | meaning |", "|---|---|---|---|"]
        for f in fields(cls):
            if f.name in GROUPS:
                continue
            if f.name not in docs:
                raise ValueError(f"{cls.__name__}.{f.name} has no docstring: add one under the field")
            if group == "env":
                default = "(required)" if f.default is MISSING else "`{}`".format(_value(
                    f.default_factory() if f.default is dataclass_missing else f.default))
            else:
                values = {t: (c if group == "top level" else c.get(group, {})).get(f.name)
                          for t, c in composed.items()}
                first = "sr" if group == "dataset" else "policy"
                default = f"`{_value(values[first])}`"
                others = [f"{t}: `{_value(v)}`" for t, v in values.items()
                          if t != first and v != values[first] and group != "dataset"]
                default += f" ({'; '.join(others)})" if others else ""
            name = f.name if group == "top level" else f"{group}.{f.name}"
            meaning = docs[f.name].replace("``", "`")
            lines.append(f"| `{name}` | {_type_name(hints[f.name])} | {default} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(options_reference(), end="")
