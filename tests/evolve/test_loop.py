"""The one generation loop (gprl.evolve.loop.Evolution) against hand-written GeneticProgramming.step loops."""

import numpy as np
import pytest
import torch

from gprl import GeneticProgramming, RegressionObjective
from gprl.evolve.constants import ConstantFitting, tune_best
from gprl.evolve.loop import Evolution

X = np.linspace(-1, 1, 30)[:, None]
OBJECTIVE = RegressionObjective(X, X[:, 0] ** 3 + 0.7 * X[:, 0], device="cpu")
G = 6


def make_gp(seed=0):
    return GeneticProgramming(1, pop_size=120, max_len=32, functions=["add", "sub", "mul"], seed=seed)


def evaluate(population, generation):
    return OBJECTIVE(population), {"generation": generation}


def same_archive(a: GeneticProgramming, b: GeneticProgramming) -> bool:
    return torch.equal(a.archive.loss, b.archive.loss) and a.archive.trees.equal(b.archive.trees)


def test_vary_finish_is_the_plain_step_loop():
    gp = make_gp()
    pop = gp.init()
    for _ in range(G):
        fitness = OBJECTIVE(pop)
        pop = gp.step(pop, fitness)

    looped, seen = make_gp(), []
    result = Evolution([looped], evaluate, generations=G).run(
        [looped.init()], report=lambda gen: seen.append((gen.number, gen.metrics, gen.stop)))
    assert result.populations[0].equal(pop) and same_archive(looped, gp)
    assert torch.equal(result.fitness[0], fitness)
    assert result.generation == G and result.stopped_by == "generations"
    # every generation is reported, the last one with the loop's reason to stop
    assert seen == [(g, {"generation": g}, "generations" if g == G - 1 else "") for g in range(G)]


def test_archive_finish_evaluates_and_archives_the_last_population_without_varying_it():
    gp = make_gp()
    pop = gp.init()
    for _ in range(G):
        pop = gp.step(pop, OBJECTIVE(pop))
    gp.archive.update(pop, OBJECTIVE(pop))

    looped, reported = make_gp(), []
    result = Evolution([looped], evaluate, generations=G, finish="archive").run(
        [looped.init()], report=lambda gen: reported.append(gen.number))
    assert result.populations[0].equal(pop) and same_archive(looped, gp)
    assert result.generation == G and looped.generation == G
    assert reported == list(range(G))  # the budget's last population is archived, not reported


@pytest.mark.parametrize("finish", ["vary", "archive"])
def test_a_stop_asked_by_report(finish):
    stop_at = 2
    gp = make_gp()
    pop = gp.init()
    for _ in range(stop_at):
        pop = gp.step(pop, OBJECTIVE(pop))
    if finish == "vary":
        pop = gp.step(pop, OBJECTIVE(pop))
    else:
        gp.archive.update(pop, OBJECTIVE(pop))

    looped = make_gp()
    result = Evolution([looped], evaluate, generations=G, finish=finish).run(
        [looped.init()], report=lambda gen: "target" if gen.number == stop_at else None)
    assert result.stopped_by == "target"
    assert result.generation == stop_at + (finish == "vary")
    assert result.populations[0].equal(pop) and same_archive(looped, gp)


def test_an_ensemble_is_independent_runs_evaluated_together():
    def alone(seed):
        gp = make_gp(seed)
        pop = gp.init()
        for _ in range(G):
            pop = gp.step(pop, OBJECTIVE(pop))
        return gp, pop

    sizes = []

    def counted(population, generation):
        sizes.append(len(population))
        return evaluate(population, generation)

    gps = [make_gp(3), make_gp(11)]
    result = Evolution(gps, counted, generations=G).run([gp.init() for gp in gps])
    for gp, pop, (ref_gp, ref_pop) in zip(gps, result.populations, map(alone, (3, 11))):
        assert pop.equal(ref_pop) and same_archive(gp, ref_gp)
    assert sizes == [240] * G  # one evaluation of both populations per generation


def test_constant_fitting_every_other_generation():
    every, trees, iterations = 2, 4, 3
    gp = make_gp(5)
    pop = gp.init()
    for g in range(G):
        loss = OBJECTIVE(pop)
        if g % every == 0:
            pop, loss = tune_best(pop, loss, OBJECTIVE, trees, iterations)
        pop = gp.step(pop, loss)

    looped = make_gp(5)
    fitting = ConstantFitting(OBJECTIVE, trees, iterations, every)
    result = Evolution([looped], evaluate, generations=G, constants=fitting).run([looped.init()])
    assert result.populations[0].equal(pop) and same_archive(looped, gp)
    untuned = make_gp(5)
    plain = Evolution([untuned], evaluate, generations=G).run([untuned.init()])
    assert not plain.populations[0].equal(pop)  # the fitting changed the search


def test_a_run_resumed_past_its_budget_evaluates_nothing():
    calls, before = [], []
    gp = make_gp()
    pop = gp.init()
    result = Evolution([gp], lambda p, g: calls.append(g), generations=3).run(
        [pop], start=3, before=lambda g, pops, stop: before.append((g, stop)))
    assert calls == [] and before == [(3, "generations")]
    assert result.fitness is None and result.generation == 3 and result.populations[0] is pop


@pytest.mark.parametrize("elapsed, last, stopped, evaluated", [
    (9.5, 1.0, "", False),               # one more generation as long as its last would end past 10 s
    (9.5, 0.2, "", True),
    (2.0, 1.0, "target_return", False),  # it had already reached its target
])
def test_a_resumed_run_applies_the_time_limit_and_a_reached_target_first(elapsed, last, stopped, evaluated):
    calls = []
    gp = make_gp()
    result = Evolution([gp], lambda p, g: calls.append(g) or evaluate(p, g), generations=100, time_limit=10.0,
                       elapsed_before=elapsed, last_before=last, stopped=stopped).run([gp.init()], start=7)
    assert bool(calls) == evaluated
    if not evaluated:
        assert (result.stopped_by, result.generation, result.fitness) == (stopped or "time_limit", 7, None)


def test_time_limit_and_the_agreed_decision():
    gp = make_gp()
    result = Evolution([gp], evaluate, generations=100, time_limit=1e-9).run([gp.init()])
    assert (result.stopped_by, result.generation) == ("time_limit", 1)
    gp = make_gp()
    result = Evolution([gp], evaluate, generations=100, agree=lambda stop: "elsewhere").run([gp.init()])
    assert (result.stopped_by, result.generation) == ("elsewhere", 1)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="finish"):
        Evolution([make_gp()], evaluate, generations=3, finish="later")
    with pytest.raises(ValueError, match="generations"):
        Evolution([make_gp()], evaluate, finish="archive")
