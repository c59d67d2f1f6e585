"""The trainer's view of a problem: the :class:`Task` interface."""

from __future__ import annotations

import abc
from typing import Any

import torch

from gprl.core.population import Population
from gprl.train.distributed import Dist


class Task(abc.ABC):
    """The trainer's view of a problem."""

    n_in: int
    n_out: int
    maximize: bool = True
    obs_names: list[str] | None = None
    score_name: str = "return"  # the metrics key "best_<score_name>" is the generation's best score
    artifact: str = "policy"    # the W&B artifact name of the exported files
    refine_share: float = 0.0   # the share of the search's time that :meth:`refine` takes after the evolution

    @classmethod
    @abc.abstractmethod
    def from_config(cls, cfg: dict[str, Any], device: str | None, dist: Dist | None = None) -> Task:
        """The task from the whole (plain) training configuration; ``device`` None: the task's choice.

        ``dist`` (:mod:`gprl.train.distributed`): this process's rank in a distributed run. Every rank builds
        the task and calls ``evaluate`` and ``finish`` with the full population; the task evaluates its share
        and gathers the results, so every rank returns the same fitness and metrics. Only rank 0 writes
        files."""

    @abc.abstractmethod
    def fingerprint(self) -> dict[str, Any]:
        """What a resumed run must match (task kind, data/environment, input and output sizes)."""

    @abc.abstractmethod
    def evaluate(self, population: Population, generation: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Fitness [P] on the population's device and per-generation metrics (JSON-able), the same on
        every rank."""

    @abc.abstractmethod
    def finish(self, population: Population, fitness: torch.Tensor | None, out_dir: str) -> dict[str, Any]:
        """Pick and export the best individual into ``out_dir``; returns a summary incl. ``files``."""

    def refine(self, seconds: float | None) -> dict[str, Any]:
        """Work on the search's result between the generations and ``finish`` for ``seconds`` (None: the
        task's own budget); returns what to report (empty: nothing done)."""
        return {}

    def draw_state(self) -> dict[str, Any]:
        """What a draw of ``gp.draws`` carries besides its population (e.g. its observation statistics)."""
        return {}

    def start_draw(self, state: dict[str, Any] | None) -> None:
        """A fresh draw starts (``state`` None) or a kept draw's ``state`` goes on."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass
