"""Island model of GeneticProgramming: selection stays inside an island, elites are kept per island, the best
trees of each island join the next one (a ring) every migration_interval generations, and islands=1 is the
plain panmictic step."""

import pytest
import torch

from gprl import GeneticProgramming, Population
from gprl.core.population import KIND_MASK, VAR

I, S = 4, 12  # islands, trees per island


def _marked_population() -> Population:
    """Island i holds single-variable trees x_i (so a tree tells its island), with distinct losses."""
    return Population.from_expressions([f"x{i}" for i in range(I) for _ in range(S)], n_in=I, max_len=16)


def _island_of(pop: Population) -> torch.Tensor:
    """The index of each tree's (only) variable."""
    is_var = ((pop.kind & KIND_MASK) == VAR) & (torch.arange(pop.max_len) < pop.lengths()[:, None])
    return pop.code.long().gather(1, is_var.long().argmax(1, keepdim=True))[:, 0]


def test_selection_stays_inside_islands_between_migrations():
    gp = GeneticProgramming(I, pop_size=I * S, max_len=16, islands=I, migration_interval=5, migrants=2,
                            elitism=1, rates={}, seed=3)  # no variation: every child is a copy of its parent
    pop, loss = _marked_population(), torch.rand(I * S, generator=torch.Generator().manual_seed(0))
    for g in range(4):  # generations 0-3: no migration
        out = gp.step(pop, loss)
        assert torch.equal(_island_of(out), torch.arange(I).repeat_interleave(S)), g


def test_elites_per_island_and_migration_ring():
    e, m = 2, 3
    gp = GeneticProgramming(I, pop_size=I * S, max_len=16, islands=I, migration_interval=1, migrants=m,
                            elitism=e, rates={"constant": 1.0}, seed=1)
    # every tree a distinct constant, so copies are recognisable; loss = its position, shuffled per island
    pop = Population.from_expressions([f"{0.01 * k:.2f} + x{k // S}" for k in range(I * S)], n_in=I,
                                      max_len=16)
    loss = torch.cat([torch.randperm(S, generator=torch.Generator().manual_seed(i)).float()
                      for i in range(I)])
    gp.step(pop, loss)  # generation 0: no migration
    out = gp.step(pop, loss)  # generation 1: migration
    for i in range(I):
        rows = slice(i * S, (i + 1) * S)
        best_here = torch.argsort(loss[rows], stable=True)[:e] + i * S
        j = (i - 1) % I  # migrants come from the island before
        best_before = torch.argsort(loss[j * S:(j + 1) * S], stable=True)[:m] + j * S
        kept = torch.cat([best_here, best_before])
        # the first e + m children of island i are bit-for-bit copies of those trees
        assert out[i * S + torch.arange(e + m)].equal(pop[kept]), i
        # the rest were made in island i by constant mutation: same structure as a tree of island i
        assert (_island_of(out)[i * S + e + m:(i + 1) * S] == i).all()


def test_one_island_is_the_panmictic_step():
    kw = {"pop_size": 60, "max_len": 32, "seed": 5, "elitism": 3}
    a, b = (GeneticProgramming(2, **kw),
            GeneticProgramming(2, islands=1, migrants=2, migration_interval=1, **kw))
    X = torch.linspace(-1, 1, 20)[:, None].repeat(1, 2)
    y = X[:, 0] ** 2
    pa = pb = a.init()
    for _ in range(5):
        pa, pb = a.step(pa, pa.fitness(X, y)), b.step(pb, pb.fitness(X, y))
    assert pa.equal(pb)


def test_islands_are_deterministic_and_improve():
    X = torch.linspace(-1, 1, 30)[:, None]
    y = X[:, 0] ** 3 + X[:, 0]
    runs = []
    for _ in range(2):
        gp = GeneticProgramming(1, pop_size=400, max_len=32, islands=4, migration_interval=3, migrants=2,
                                elitism=2, functions=["add", "sub", "mul"], seed=11)
        pop = gp.init()
        first = float(pop.fitness(X, y).min())
        for _ in range(15):
            pop = gp.step(pop, pop.fitness(X, y))
        runs.append((pop, gp.archive.best()[0]))
    assert runs[0][0].equal(runs[1][0]) and runs[0][1] == runs[1][1]
    assert runs[0][1] < first


@pytest.mark.parametrize("kw, match", [
    ({"pop_size": 10, "islands": 3}, "multiple of islands"),
    ({"pop_size": 12, "islands": 4, "elitism": 2, "migrants": 2}, "fit an island"),
    ({"islands": 0}, "islands"),
    ({"islands": 2, "migration_interval": 0}, "migration_interval"),
    ({"islands": 2, "migrants": -1}, "migrants"),
])
def test_bad_island_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        GeneticProgramming(1, **kw)
