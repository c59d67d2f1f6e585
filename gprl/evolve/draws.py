"""Several fresh starts, one continued (``gp.draws``, ``gp.draw_generations``).

The search starts ``count`` times from a fresh random population, each draw evolved for ``generations``
generations on its own episode schedule and observation statistics; then the draw whose last generation
scored best goes on for the rest of the budget, and the others end (their best trees stay in the hall of
fame). A budget that ends inside the draws exports the best tree they found. Where a search's first
generations climb decides most of where it ends, so a few short draws buy a better basin for the long run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Draws:
    count: int = 1
    generations: int = 0

    @classmethod
    def from_config(cls, gp: dict[str, Any]) -> Draws:
        count, generations = gp.get("draws"), gp.get("draw_generations")
        for name, v in (("draws", count), ("draw_generations", generations)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"gp.{name} must be a positive integer or null, got {v!r}")
        if not count or count == 1:
            return cls()
        if generations is None:
            raise ValueError(f"gp.draws={count} needs gp.draw_generations: the generations each draw is "
                             "evolved before the best one is continued")
        return cls(count, generations)

    @property
    def screen(self) -> int:
        """The generations the draws take before the best one goes on (0: one population)."""
        return self.count * self.generations if self.count > 1 else 0

    def index(self, generation: int) -> int | None:
        """The draw ``generation`` belongs to while the draws last (from 0), else None."""
        return generation // self.generations if generation < self.screen else None

    def ends(self, generation: int) -> int | None:
        """The draw whose last generation ``generation`` is, or None."""
        draw = self.index(generation)
        return draw if draw is not None and (generation + 1) % self.generations == 0 else None

    def check_resume(self, run: Draws, generation: int) -> None:
        """A resumed run's draws (``self``) against the run's own (``run``) at ``generation``, the next one to
        evaluate: the count may change while the draws last, to no fewer than the draw under way, and a draw's
        generations not at all (the generations played would belong to other draws)."""
        if self == run or generation == 0:
            return
        under_way = run.index(generation)
        if not run.screen:
            why = "it has no draws"
        elif under_way is None:
            why = f"its draws ended at generation {run.screen}"
        elif self.generations != run.generations and self.screen:
            why = f"its draws are of {run.generations} generations"
        elif self.count <= under_way:
            why = f"draw {under_way + 1} is under way"
        else:
            return
        raise ValueError(
            f"gp.draws={self.count} gp.draw_generations={self.generations or None} on resume: the run is at "
            f"generation {generation} and {why}. The draws can change only while they last, keeping "
            "gp.draw_generations and at least the draw under way; resume with the run's "
            f"gp.draws={run.count} gp.draw_generations={run.generations or None} or start a new run")

    def budget_note(self, first_draw_s: float, evolution_limit: float | None,
                    time_limit: float | None) -> str | None:
        """A line for a user whose time limit the draws will use up at the first draw's pace, else None.
        ``evolution_limit``: the evolution's share of ``time_limit`` (the rest is a refinement's)."""
        needed = first_draw_s * self.count
        if not evolution_limit or not time_limit or needed < evolution_limit:
            return None
        return (f"gprl: the first draw took {first_draw_s:.0f} s, so the time limit ends inside the "
                f"{self.count} draws and the best tree they found is exported; gp.time_limit above about "
                f"{needed * time_limit / evolution_limit:.0f} s lets the best draw go on")

    def schedule_generation(self, generation: int) -> int:
        """``generation``'s place on its draw's schedule (episode lengths): counted from the draw's first;
        the continued draw goes on from its last."""
        if not self.screen:
            return generation
        if generation < self.screen:
            return generation % self.generations
        return generation - (self.count - 1) * self.generations
