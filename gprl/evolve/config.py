"""Every setting of the search in one validated object: :class:`GPConfig`.

``GeneticProgramming`` runs one; the training app's ``gp`` config group is its schema (plus the stopping
rules, :func:`hydra_fields`), and the estimators build one from their parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from gprl.core import functions as F
from gprl.core.encoding import MAX_DEPTH_LIMIT, METHODS
from gprl.evolve import selection as S
from gprl.evolve.variation import OPS

DEFAULT_RATES: dict[str, float] = {
    "crossover": 0.8, "subtree": 0.05, "point": 0.03, "multipoint": 0.01, "hoist": 0.02, "insert": 0.02,
    "delete": 0.02, "constant": 0.03, "multiconstant": 0.02,
}


def _schema(kind: Any) -> dict[str, Any]:
    """The setting's type in the Hydra schema (OmegaConf types no tuples, unions of containers or
    ``X | None``)."""
    return {"schema": kind}


@dataclass(frozen=True)
class GPConfig:
    """The search's settings, checked when made (a ValueError names the setting and the fix)."""

    population_size: int = field(default=1000, metadata=_schema(int))
    """Trees per generation (a multiple of ``islands``)."""
    max_len: int = field(default=64, metadata=_schema(Optional[int]))  # noqa: UP045
    """Longest tree, in nodes; variation that would exceed it keeps the parent."""
    functions: Any = field(default=None, metadata=_schema(Optional[list[str]]))  # noqa: UP045
    """Function set: names of ``gprl.functions`` or a name -> sampling weight map (None: the default set)."""
    init_method: str = field(default="ramped", metadata=_schema(str))
    """Initial trees: ``grow``, ``full`` or ``ramped`` (half and half)."""
    init_depth: tuple[int, int] = field(default=(2, 6), metadata=_schema(list[int]))
    """(min, max) depth of the initial trees."""
    init_every_output: bool = field(default=False, metadata=_schema(Optional[bool]))  # noqa: UP045
    """Multi-output trees: every initial tree writes every output (``Population.random(every_output=)``);
    policies: null is true (an action the first trees leave constant is rarely taken up later)."""
    max_depth: int = field(default=17, metadata=_schema(Optional[int]))  # noqa: UP045
    """Deepest tree variation may make (<= 64; 0: no bound)."""
    selection: str = field(default="tournament", metadata=_schema(str))
    """Parent selection, one of ``gprl.selection.SELECTIONS`` (lexicase needs per-case errors in ``step``)."""
    tournament_size: int = field(default=7, metadata=_schema(Optional[int]))  # noqa: UP045
    """Trees per tournament (``selection="tournament"``)."""
    truncation_fraction: float = field(default=0.5, metadata=_schema(float))
    """The best share parents are drawn from (``selection="truncation"``)."""
    rank_pressure: float = field(default=1.5, metadata=_schema(float))
    """Linear ranking's selective pressure in [1, 2] (``selection="rank"``)."""
    lexicase_epsilon: Any = field(default="mad", metadata=_schema(Any))
    """Epsilon-lexicase tolerance per case: ``"mad"`` (median absolute deviation) or a number."""
    elitism: int = field(default=1, metadata=_schema(int))
    """Best trees copied unchanged into the next generation (per island)."""
    parsimony: float = field(default=0.0, metadata=_schema(float))
    """Added to the loss selection sees, per node (not to elitism or the archive)."""
    maximize: bool = field(default=False, metadata=_schema(bool))
    """Fitness is better when higher (policies' returns) instead of lower (losses)."""
    rates: Mapping[str, float] | None = field(
        default=None, metadata=_schema(Optional[dict[str, float]]))  # noqa: UP045
    """Share of children per operator of ``gprl.variation.OPS`` (sum <= 1, the rest are copies;
    None: defaults)."""
    crossover_leaf_prob: float | None = field(
        default=0.1, metadata=_schema(Optional[float]))  # noqa: UP045
    """Crossover picks a leaf as its point with this probability (None: uniformly over nodes)."""
    subtree_depth: int = field(default=4, metadata=_schema(int))
    """Depth of the subtrees that subtree mutation grows."""
    multi_prob: float = field(default=0.1, metadata=_schema(float))
    """Per-node probability of the multi-point and multi-constant mutations."""
    const_sigma: float = field(default=0.1, metadata=_schema(float))
    """Standard deviation of constant mutation, relative to the constant (absolute near 0)."""
    const_prob: float = field(default=0.2, metadata=_schema(float))
    """A new leaf is a constant with this probability, else a variable."""
    const_range: tuple[float, float] = field(default=(-1.0, 1.0),
                                             metadata=_schema(Optional[list[float]]))  # noqa: UP045
    """New constants are uniform in this range."""
    output_prob: float = field(default=0.3, metadata=_schema(float))
    """Multi-output trees: a new function node writes an output (Modi node) with this probability."""
    islands: int = field(default=1, metadata=_schema(int))
    """Island model: consecutive blocks of the population that select only among themselves."""
    migration_interval: int = field(default=10, metadata=_schema(int))
    """Islands: every this many generations each island's best ``migrants`` trees join the next island."""
    migrants: int = field(default=1, metadata=_schema(int))
    """Islands: trees each island sends to the next one at a migration."""
    es_share: float = field(default=0.0, metadata=_schema(Optional[float]))  # noqa: UP045
    """Share of the population given to the evolution strategy over the best trees' constants
    (``gprl.evolve.es``; 0: off): ``es_share * population_size // (2·es_pairs + 1)`` trees tuned per
    generation, each with ``2·es_pairs + 1`` rows at the end of the population (none: off)."""
    es_pairs: int = field(default=8, metadata=_schema(int))
    """Antithetic perturbations per tuned tree and generation."""
    es_sigma: float = field(default=0.05, metadata=_schema(float))
    """Perturbation size, relative to each constant (absolute below 0.1)."""
    es_step: float = field(default=0.5, metadata=_schema(float))
    """Step along the estimated direction, in units of the perturbation size."""

    def __post_init__(self):
        def integer(name: str, low: int) -> int:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
            return int(v)

        P = integer("population_size", 1)
        integer("tournament_size", 1)
        for name, low in (("islands", 1), ("migration_interval", 1), ("migrants", 0), ("max_len", 1),
                          ("es_pairs", 1)):
            integer(name, low)
        if isinstance(self.elitism, bool) or not isinstance(self.elitism, (int, np.integer)) \
                or not 0 <= self.elitism <= P:
            raise ValueError(f"elitism must be an integer in 0..population_size ({P}), got {self.elitism!r}")
        if self.selection not in S.SELECTIONS:
            raise ValueError(f"selection must be one of {list(S.SELECTIONS)}, got {self.selection!r}")
        if P % self.islands:
            raise ValueError(f"population_size ({P}) must be a multiple of islands ({self.islands})")
        if self.islands > 1 and self.elitism + self.migrants > P // self.islands:
            raise ValueError(f"elitism + migrants ({self.elitism} + {self.migrants}) must fit an island of "
                             f"{P // self.islands} trees; lower them or use fewer islands")
        if not 0 <= float(self.es_share) < 1:
            raise ValueError(f"es_share must be in [0, 1) (0: off), got {self.es_share!r}")
        if self.es_centers * (2 * self.es_pairs + 1) > P - self.elitism * self.islands:
            raise ValueError("es_share leaves no room for the elites; lower es_share or elitism")
        for name in ("es_sigma", "es_step"):
            if not (float(getattr(self, name)) > 0 and np.isfinite(float(getattr(self, name)))):
                raise ValueError(f"{name} must be a finite number > 0, got {getattr(self, name)!r}")
        if self.init_method not in METHODS:
            raise ValueError(f"init_method must be one of {list(METHODS)}, got {self.init_method!r}")
        d = self.init_depth
        if not (isinstance(d, (tuple, list)) and len(d) == 2 and 0 <= d[0] <= d[1] <= MAX_DEPTH_LIMIT):
            raise ValueError(f"init_depth must be (min, max) with 0 <= min <= max <= 64, got {d!r}")
        if not (self.parsimony >= 0 and np.isfinite(self.parsimony)):
            raise ValueError(f"parsimony must be a finite number >= 0, got {self.parsimony!r}")
        rates = dict(DEFAULT_RATES if self.rates is None else self.rates)
        for name, r in rates.items():
            if name not in OPS or name == "exchange":
                raise ValueError(f"rates: unknown operator {name!r}; "
                                 f"choose from {[o for o in OPS if o != 'exchange']}")
            if not (0.0 <= float(r) <= 1.0):
                raise ValueError(f"rates: rate of {name!r} must be in [0, 1], got {r!r}")
        if sum(rates.values()) > 1.0 + 1e-6:
            raise ValueError("rates must sum to <= 1 (the rest is reproduction), "
                             f"got {sum(rates.values()):.4f}")
        F.function_weights(self.functions)  # names the unknown function, if any
        normal = {**{name: int(getattr(self, name)) for name in (
            "population_size", "max_len", "max_depth", "tournament_size", "elitism", "subtree_depth",
            "islands", "migration_interval", "migrants", "es_pairs")},
                  **{name: float(getattr(self, name)) for name in ("es_share", "es_sigma", "es_step")},
                  "init_depth": tuple(int(v) for v in d),
                  "const_range": tuple(float(c) for c in self.const_range),
                  "rates": rates, "functions": dict(self.functions) if isinstance(self.functions, Mapping)
                  else None if self.functions is None else list(self.functions)}
        for name, value in normal.items():
            object.__setattr__(self, name, value)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], **overrides: Any) -> GPConfig:
        """The settings in ``values`` that this class has (e.g. the app's ``gp`` group), then ``overrides``;
        a null setting whose own default is not null takes that default."""
        fields = {f.name: f.default for f in dataclasses.fields(cls)}
        given = {k: v for k, v in values.items() if k in fields and (v is not None or fields[k] is None)}
        return cls(**{**given, **overrides})

    @property
    def es_centers(self) -> int:
        """Trees the evolution strategy tunes per generation (see ``es_share``)."""
        return int(float(self.es_share) * self.population_size) // (2 * int(self.es_pairs) + 1)

    def replace(self, **changes: Any) -> GPConfig:
        return dataclasses.replace(self, **changes)


def hydra_fields() -> list[tuple[str, Any, Any]]:
    """(name, type, field) of every setting but ``maximize`` (the task decides it), for the app's schema."""
    out = []
    for f in dataclasses.fields(GPConfig):
        if f.name == "maximize":
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(default, tuple):
            default = list(default)
        value = field(default_factory=lambda d=default: type(d)(d)) if isinstance(default, (list, dict)) \
            else field(default=default)
        out.append((f.name, f.metadata["schema"], value))
    return out
