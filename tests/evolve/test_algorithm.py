"""The generation loop: elitism, archive, determinism and end-to-end symbolic regression on the CPU."""

import pytest
import torch

import gprl
from gprl import GeneticProgramming, Population
from tests.reference import variation as ref

QUARTIC_X = torch.linspace(-1, 1, 20)[:, None]
QUARTIC_Y = (QUARTIC_X ** 4 + QUARTIC_X ** 3 + QUARTIC_X ** 2 + QUARTIC_X)[:, 0]


def quartic_gp(seed, **kw):
    return GeneticProgramming(1, pop_size=500, max_len=128, functions=["add", "sub", "mul", "div"],
                              const_prob=0.0, seed=seed, **kw)


def test_elitism_keeps_the_best_bit_for_bit_and_nan_is_never_elite():
    gp = GeneticProgramming(2, pop_size=300, max_len=32, elitism=5, seed=1)
    pop = gp.init()
    fit = torch.randn(300)
    fit[torch.arange(0, 300, 7)] = float("nan")
    fit[3] = -float("inf")  # a loss of -inf is non-finite: never the best
    children = gp.step(pop, fit)
    finite = torch.where(torch.isfinite(fit), fit, float("inf"))
    best = torch.argsort(finite, stable=True)[:5]
    assert children[:5].equal(pop[best])
    assert 3 not in best.tolist()
    assert children.validate().abs().sum() == 0 and len(children) == 300


def test_archive_keeps_best_loss_per_length_and_its_front():
    pop = Population.from_expressions(["x0", "x0 + 1", "x0 * x0", "x0 - x0*x0", "x0"], n_in=1, max_len=8)
    gp = GeneticProgramming(1, pop_size=5, max_len=8, seed=0)
    fit = torch.tensor([3.0, 1.0, 2.0, 0.5, float("nan")])
    gp.archive.update(pop, gprl.selection.loss_of(fit))
    assert gp.archive.loss[1].item() == 3.0 and gp.archive.loss[3].item() == 1.0
    assert gp.archive.loss[5].item() == 0.5
    lengths, losses, trees = gp.archive.front()
    assert lengths.tolist() == [1, 3, 5] and losses.tolist() == [3.0, 1.0, 0.5]
    assert trees[1].equal(pop[1])
    loss, tree = gp.archive.best()
    assert loss == 0.5 and tree.equal(pop[3])
    gp.archive.update(pop, torch.tensor([0.1, 5.0, 5.0, 5.0, 5.0]))  # only length 1 improves
    assert gp.archive.loss[1].item() == pytest.approx(0.1) and gp.archive.loss[5].item() == 0.5


@pytest.mark.parametrize("selection", ["tournament", "truncation", "rank", "roulette", "lexicase"])
def test_same_seed_same_population_after_50_generations(selection):
    def run(seed):
        gp = GeneticProgramming(1, pop_size=200, max_len=48, max_depth=10, selection=selection, seed=seed,
                                parsimony=0.001, rates={**gprl.evolve.algorithm.DEFAULT_RATES,
                                                        "crossover": 0.7, "subtree": 0.1})
        pop = gp.init()
        for _ in range(50):
            err = (pop.forward(QUARTIC_X)[:, :, 0] - QUARTIC_Y).abs()
            pop = gp.step(pop, err.pow(2).mean(1), errors=err)
            assert pop.validate().abs().sum() == 0
            assert int(pop.depths().max()) <= 10
        return pop

    a = run(7)
    assert a.equal(run(7))
    assert not a.equal(run(8))


def test_quartic_is_solved_by_most_seeds():
    solved = 0
    for seed in range(10):
        gp = quartic_gp(seed)
        pop = gp.init()
        for _ in range(50):
            fit = pop.fitness(QUARTIC_X, QUARTIC_Y)
            pop = gp.step(pop, fit)
        loss, tree = gp.archive.best()
        if loss < 1e-10:
            solved += 1
            # the archived tree really is a solution: recompute with the reference evaluator
            pred = torch.from_numpy(ref_eval(tree)).float()
            assert float((pred - QUARTIC_Y).pow(2).mean()) < 1e-8
    assert solved >= 8


def ref_eval(tree):
    from tests.reference import evaluator  # the independent pure-Python evaluator

    return evaluator.eval_population(tree, QUARTIC_X)[0, :, 0]


def test_gp_argument_errors():
    with pytest.raises(ValueError, match="rates"):
        GeneticProgramming(1, rates={"crossover": 0.9, "subtree": 0.5})
    with pytest.raises(ValueError, match="rates: unknown operator"):
        GeneticProgramming(1, rates={"swap": 0.1})
    with pytest.raises(ValueError, match="selection"):
        GeneticProgramming(1, selection="best")
    with pytest.raises(ValueError, match="elitism"):
        GeneticProgramming(1, pop_size=10, elitism=11)
    gp = GeneticProgramming(1, pop_size=10, max_len=16)
    pop = gp.init()
    with pytest.raises(ValueError, match="fitness"):
        gp.step(pop, torch.zeros(9))
    with pytest.raises(ValueError, match="errors"):
        GeneticProgramming(1, pop_size=10, max_len=16, selection="lexicase").step(pop, torch.zeros(10))


def test_reference_helpers_agree_with_population_sizes():
    pop = Population.random(50, 2, max_len=32, seed=3)
    for nodes, sizes in ref.rows(pop):
        assert ref.sizes_of(nodes) == sizes


def test_pagie1_regression():
    # Pagie-1 on the 26x26 grid of [-5, 5]^2, pop 1000, 50 generations; established on the CPU for seeds 0-19:
    # 10 of 20 runs end below 0.05 (the best at 0.0), the rest on plateaus near 0.06-0.23 (0.2296 is the
    # best run-of-the-mill formula). Over seeds 20-59 the same code gets 26 of 40 below 0.05. Guard: the
    # share of good runs and the best stay within reach of that.
    g = torch.linspace(-5, 5, 26)
    X = torch.cartesian_prod(g, g)
    y = 1 / (1 + X[:, 0] ** -4) + 1 / (1 + X[:, 1] ** -4)
    best = []
    for seed in range(20):
        gp = GeneticProgramming(2, pop_size=1000, max_len=64, max_depth=12, const_prob=0.1, seed=seed,
                                functions=["add", "sub", "mul", "div", "inv"])
        pop = gp.init()
        for _ in range(50):
            pop = gp.step(pop, pop.fitness(X, y))
        best.append(gp.archive.best()[0])
    assert sum(b < 0.05 for b in best) >= 6 and min(best) < 0.01, sorted(best)


def reference_archive_update(archive, population, loss):
    """The unfused archive update in plain torch (lowest finite loss per length, lowest index among equals,
    replacing only strictly better entries)."""
    P, L1 = len(population), len(archive.loss)
    length = population.lengths()
    finite = torch.isfinite(loss)
    best = torch.full((L1,), float("inf")).scatter_reduce(0, length[finite], loss[finite], "amin")
    hit = finite & (loss == best[length])
    first = torch.full((L1,), P).scatter_reduce(0, length, torch.where(hit, torch.arange(P), P), "amin")
    take = (best < archive.loss) & (first < P)
    rows = first.clamp(max=P - 1)
    trees = [torch.where(take[:, None], t[rows], a)
             for t, a in zip(population.tensors(), archive.trees.tensors())]
    return trees, torch.where(take, best, archive.loss)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_archive_update_equals_the_unfused_reference(device):
    from gprl.evolve.algorithm import ParetoArchive

    g = torch.Generator().manual_seed(5)
    archive = ParetoArchive(2, 1, 32, "cpu")
    for step in range(12):
        pop = gprl.Population.random(300, 2, max_len=32, max_depth=5, seed=step)
        loss = torch.randint(-3, 6, (300,), generator=g).float() / 4  # ties, and -0.0 below
        loss[torch.rand(300, generator=g) < 0.1] = float("inf")
        loss[torch.rand(300, generator=g) < 0.05] = float("nan")
        loss[loss == 0] = -0.0
        trees, want = reference_archive_update(archive, pop, loss)
        dev = ParetoArchive(2, 1, 32, device)
        dev.loss, dev.trees = archive.loss.to(device), archive.trees.to(device)
        dev.update(pop.to(device), loss.to(device))
        assert torch.equal(dev.loss.cpu(), want)
        for got, expected in zip(dev.trees.tensors(), trees):
            assert torch.equal(got.cpu(), expected)
        archive.loss, archive.trees = want, gprl.Population(*trees, n_in=2, n_out=1)
