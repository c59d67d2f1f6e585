"""The evolution strategy over constants (``gprl.evolve.es``) against a NumPy reading of its rule."""

import numpy as np
import pytest
import torch

from gprl import GeneticProgramming, Population
from gprl.core.encoding import CONST, KIND_MASK
from gprl.evolve.config import GPConfig

CENTERS, PAIRS = 2, 5
GROUP = 2 * PAIRS + 1
TARGET = np.array([0.5, -2.0, 3.0])


def es_gp(**kw):
    return GeneticProgramming(2, pop_size=60, max_len=16, elitism=2, functions=["add", "mul"], seed=3,
                              es_share=CENTERS * GROUP / 60 + 1e-9, es_pairs=PAIRS, es_sigma=0.1,
                              es_step=0.5, **kw)


def constants(pop: Population) -> list[np.ndarray]:
    kind, _, _, value, _ = pop.tensors()
    return [value[i][(kind[i] & KIND_MASK) == CONST].double().numpy() for i in range(len(pop))]


def quadratic_loss(pop: Population) -> torch.Tensor:
    """(c - TARGET)^2 summed over a tree's first constants; trees without constants score 100."""
    out = [float(((c[:3] - TARGET[: len(c)]) ** 2).sum()) if len(c) else 100.0 for c in constants(pop)]
    return torch.tensor(out, dtype=torch.float32)


def start_population() -> Population:
    exprs = ["x0 * 1.5 + x1 * 0.25 + 1.0", "x0 + x1 * 2.0", "x0 * -1.0 + 0.5", "x0 * x1"] * 15
    return Population.from_expressions(exprs, n_in=2, max_len=16)


def test_pairs_are_antithetic_perturbations_of_distinct_best_trees():
    gp, pop = es_gp(), start_population()
    loss = quadratic_loss(pop)
    children = gp.step(pop, loss)
    rows = children[60 - CENTERS * GROUP:]
    # the centers: the two best trees with constants, distinct in structure
    order = [int(i) for i in torch.argsort(loss, stable=True)]
    want = [pop[order[0]]]
    want.append(next(pop[i] for i in order if not torch.equal(pop[i].tensors()[0], want[0].tensors()[0])
                     or not torch.equal(pop[i].tensors()[1], want[0].tensors()[1])))
    for k in range(CENTERS):
        group = rows[k * GROUP:(k + 1) * GROUP]
        assert group[0].equal(want[k])  # no pairs to read at g = 0: a copy of the center
        c = constants(want[k])[0]
        cs = constants(group)
        plus, minus = np.stack(cs[1:PAIRS + 1]), np.stack(cs[PAIRS + 1:])
        np.testing.assert_allclose((plus + minus) / 2, np.broadcast_to(c, plus.shape), rtol=1e-6, atol=1e-6)
        assert (np.abs(plus - c) > 0).all()  # every constant is perturbed
        for t in ("kind", "code", "out", "size"):  # only constants differ
            i = ("kind", "code", "out", "value", "size").index(t)
            assert (group.tensors()[i] == want[k].tensors()[i]).all()


def test_step_follows_the_antithetic_estimate_and_pairs_stay_out_of_selection():
    gp, pop = es_gp(), start_population()
    pop = gp.step(pop, quadratic_loss(pop))
    loss = quadratic_loss(pop)
    first = 60 - CENTERS * GROUP
    loss[first + 1] = -5.0  # a lucky pair member: neither an elite nor the next center
    children = gp.step(pop, loss)
    L = loss.double().numpy()
    stepped = children[first::GROUP]
    for k in range(CENTERS):
        base = first + k * GROUP
        cs = constants(pop[base + 1: base + GROUP])
        plus, minus = np.stack(cs[:PAIRS]), np.stack(cs[PAIRS:])
        lp, lm = L[base + 1: base + 1 + PAIRS], L[base + 1 + PAIRS: base + GROUP]
        sd = np.std(np.concatenate([lp, lm]), ddof=1)
        center = ((plus + minus) / 2).mean(0)
        want = center - 0.5 / (PAIRS * sd) * ((lp - lm)[:, None] * (plus - minus) / 2).sum(0)
        np.testing.assert_allclose(constants(stepped[k])[0], want, rtol=1e-5, atol=1e-6)
        if k == 1:  # untouched by the lucky value: the step reduces the loss
            assert quadratic_loss(stepped[k]).item() < float(np.sum((center[:3] - TARGET[:len(center)]) ** 2))
    elites = children[:2]
    assert not any(elites[i].equal(pop[first + 1]) for i in range(2))


def test_es_is_deterministic_and_a_foreign_population_is_not_read_as_pairs():
    def run():
        gp, pop = es_gp(), start_population()
        for _ in range(4):
            pop = gp.step(pop, quadratic_loss(pop))
        return pop

    assert run().equal(run())
    gp, pop = es_gp(), start_population()
    gp.generation = 1  # rows that are no pairs: every group restarts from a copy of its center
    children = gp.step(pop, quadratic_loss(pop))
    first = 60 - CENTERS * GROUP
    best = int(torch.argmin(quadratic_loss(pop)))
    assert children[first].equal(pop[best])
    small = start_population()[:7]  # fewer trees than the strategy's rows: nothing to read, still 60 children
    assert len(gp.step(small, quadratic_loss(small))) == 60


def test_es_settings_are_checked():
    assert es_gp().es.centers == CENTERS
    off = GPConfig.from_mapping({"es_share": None, "init_every_output": None, "population_size": 50})
    assert (off.es_share, off.init_every_output, off.population_size) == (0.0, False, 50)
    assert GeneticProgramming(2, pop_size=20, es_share=0.5, es_pairs=8).es is None  # no group fits: off
    with pytest.raises(ValueError, match="es_share"):
        GeneticProgramming(2, pop_size=20, es_share=1.0)
    with pytest.raises(ValueError, match="elites"):
        GeneticProgramming(2, pop_size=20, es_share=0.9, es_pairs=4, elitism=5)
    with pytest.raises(ValueError, match="es_sigma"):
        GeneticProgramming(2, pop_size=200, es_share=0.1, es_sigma=0.0)
