"""The generation loop that the estimators and the training app both drive: evaluate, report, vary.

    search = Evolution([gp], lambda pop, g: (objective(pop), {}), generations=50)
    result = search.run([gp.init()])
    best = gp.archive.best()

Every generation the populations are evaluated together (one ``evaluate`` call on their concatenation: an
ensemble of independent searches costs one batched evaluation), the constants of their best trees are
optionally fitted (:class:`gprl.evolve.constants.ConstantFitting`), the caller's ``report`` sees the result
and may stop the search, and each population is varied by its own :class:`GeneticProgramming` (which also
archives it). ``generations`` counts variations; ``finish`` says what happens where the search stops:

* ``"vary"`` (the training app): the stopping generation is varied like any other, so the search ends on an
  unevaluated population, the state a checkpoint resumes from bit-identically;
* ``"archive"`` (the estimators): the search ends on an evaluated population, archived but not varied; when
  the generation budget ends it, the budget's last population (number ``generations``) is evaluated, its
  constants fitted and archived without being reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gprl.core.population import Population
from gprl.evolve import selection as S
from gprl.evolve.algorithm import GeneticProgramming
from gprl.evolve.constants import ConstantFitting

FINISHES = ("vary", "archive")

Evaluate = Callable[[Population, int], "tuple[torch.Tensor, dict[str, Any]]"]


@dataclass
class Generation:
    """One evaluated generation, as ``report`` sees it (one entry per population in the lists)."""

    number: int
    populations: list[Population]
    fitness: list[torch.Tensor]
    metrics: dict[str, Any]
    evaluation_s: float  # the evaluation's wall time (with constant fitting)
    elapsed_s: float     # since the search began, plus ``elapsed_before``
    stop: str            # the loop's own reason to stop after it ("generations", "time_limit") or ""


@dataclass
class Result:
    populations: list[Population]       # the final populations (varied ones when ``finish="vary"``)
    fitness: list[torch.Tensor] | None  # of the last evaluated generation; None when none was evaluated
    generation: int                     # the final populations' generation number (= variations made)
    stopped_by: str


def same_decision(reason: str) -> str:
    return reason


class Evolution:
    """The loop over generations of one or several independent populations (see the module docstring).

    ``evaluate(population, generation) -> (fitness [P], metrics)`` scores all populations at once (the
    :class:`gprl.train.tasks.Task` interface); ``gps[k]`` varies population ``k`` and holds its archive.
    ``time_limit`` is in seconds, counting ``elapsed_before`` (a resumed run's earlier time); the loop stops
    where one more generation, as long as the last, would end past it (a resumed run's last:
    ``last_before``, the :attr:`last_s` its checkpoint kept; ``stopped``: a reason to stop it already had,
    so a run resumed after its search ended evaluates nothing more). ``step`` makes
    the next population (default ``gp.step``; the training app varies on one process and shares the result),
    and ``agree`` turns this process's stop decision into the one every process takes."""

    def __init__(self, gps: Sequence[GeneticProgramming], evaluate: Evaluate, *,
                 generations: int | None = None,
                 time_limit: float | None = None, elapsed_before: float = 0.0, last_before: float = 0.0,
                 stopped: str = "", constants: ConstantFitting | None = None, finish: str = "vary",
                 step: Callable[[GeneticProgramming, Population, torch.Tensor], Population] = \
                 GeneticProgramming.step,
                 agree: Callable[[str], str] = same_decision):
        if finish not in FINISHES:
            raise ValueError(f"finish must be one of {FINISHES}, got {finish!r}")
        if finish == "archive" and generations is None:
            raise ValueError('finish="archive" needs a generation budget (generations)')
        self.gps, self.evaluate, self.generations = list(gps), evaluate, generations
        self.time_limit, self.elapsed_before, self.stopped = time_limit, elapsed_before, stopped
        self.last_s = last_before  # the last whole generation's seconds: the next is expected to take as long
        self.constants, self.finish, self.step, self.agree = constants, finish, step, agree
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds of search so far, counting ``elapsed_before``."""
        return self.elapsed_before + time.perf_counter() - self.started

    def run(self, populations: Sequence[Population], *, start: int = 0,
            report: Callable[[Generation], str | None] | None = None,
            before: Callable[[int, list[Population], str], None] | None = None) -> Result:
        """Evolves ``populations`` (generation ``start``, one per GP) until a stopping rule holds.

        ``before(generation, populations, stop)`` runs whenever a population is about to be evaluated
        (``stop`` "") or ends the search (``stop`` the reason); ``report(generation)`` after each evaluation
        returns a reason to stop ("" or None: go on), ranked after the loop's own rules."""
        self.started = time.perf_counter()
        pops, g, fitness = list(populations), start, None
        began = None
        # a resumed run whose search had ended (its generations, its time or its target) evaluates nothing
        budget_spent = self.finish == "vary" and self.generations is not None and start >= self.generations
        late = self._out_of_time(self.elapsed_before) if self.elapsed_before else ""
        stop = "generations" if budget_spent else self.stopped or late
        while True:
            if before is not None:
                before(g, pops, stop)
            if stop:
                break
            now = time.perf_counter()
            if began is not None:
                self.last_s = now - began
            began = now
            fitness, metrics = self._evaluate(pops, g)
            if self.finish == "archive" and g == self.generations:
                stop = "generations"
            else:
                reached = self.finish == "vary" and self.generations is not None and g + 1 >= self.generations
                elapsed = self.elapsed()
                stop = "generations" if reached else self._out_of_time(elapsed)
                if report is not None:  # reported even when the loop stops after it
                    asked = report(Generation(g, pops, fitness, metrics, time.perf_counter() - began, elapsed,
                                              stop))
                    stop = stop or asked or ""
                stop = self.agree(stop)
            if stop and self.finish == "archive":
                for gp, pop, fit in zip(self.gps, pops, fitness):
                    gp.archive.update(pop, S.loss_of(fit, gp.maximize))
                break
            pops = [self.step(gp, pop, fit) for gp, pop, fit in zip(self.gps, pops, fitness)]
            g += 1
        return Result(pops, fitness, g, stop)

    def _out_of_time(self, elapsed: float) -> str:
        """"time_limit" where one more generation, as long as the last, would end past the limit."""
        late = self.time_limit is not None and elapsed + self.last_s >= self.time_limit
        return "time_limit" if late else ""

    def _evaluate(self, pops: list[Population], g: int) -> tuple[list[torch.Tensor], dict[str, Any]]:
        fitness, metrics = self.evaluate(pops[0] if len(pops) == 1 else Population.cat(pops), g)
        fitness = list(fitness.split([len(p) for p in pops]))
        if self.constants is not None and self.constants.due(g):
            for k, pop in enumerate(pops):
                pops[k], fitness[k] = self.constants(pop, fitness[k])
        return fitness, metrics
