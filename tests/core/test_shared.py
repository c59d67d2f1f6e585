"""The CPU's shared-subtree evaluation (kernels/subtrees.h): the interpreter's bits on populations that repeat
their subtrees, as evolved ones do."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import gprl
from gprl import Population
from tests.core.test_eval import random_population
from tests.reference import evaluator as ref

# the benchmark's count of repeated subtrees (scripts/bench_eval.py --evolved), checked below by hand
_spec = importlib.util.spec_from_file_location(
    "bench_eval", Path(__file__).resolve().parents[2] / "scripts" / "bench_eval.py")
bench_eval = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_eval)
repeated_share = bench_eval.repeated_share


def bred_population(n_out: int, seed: int, parents: int = 150) -> Population:
    """Random trees (every function, Modi nodes), then three rounds of crossover among them: the children
    carry their parents' subtrees, and some trees repeat whole."""
    pop = random_population(parents, 3, n_out, seed)
    for r in range(3):
        pop = Population.cat([pop, gprl.crossover(pop, seed=seed + r)])
    return pop


def test_repeated_share_by_hand():
    # add(sin(x0*x1), x0*x1) and x0*x1: of 5 function nodes the second and third x0*x1 repeat the first
    pop = Population.from_expressions(["sin(x0*x1) + x0*x1", "x0*x1"], n_in=2)
    assert repeated_share(pop) == pytest.approx(2 / 5)
    assert repeated_share(Population.from_expressions(["x0 + x1", "x0 - x1"], n_in=2)) == 0


def assert_same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("n_out", [1, 3])
def test_shared_subtrees_give_the_interpreters_bits(n_out):
    pop = bred_population(n_out, seed=n_out)
    assert repeated_share(pop) > 0.4
    rng = np.random.default_rng(n_out)
    D = 1100  # five chunks of rows, the last one short; auto may take the graph from 1,024
    X = torch.from_numpy(ref.random_inputs(rng, (D, 3)))
    y = torch.from_numpy(rng.normal(size=(D, n_out)).astype(np.float32))
    y = y if n_out > 1 else y[:, 0]
    w = torch.from_numpy(rng.uniform(0, 2, size=D).astype(np.float32))
    shared = pop.forward(X, strategy="shared")
    assert_same_bits(shared, pop.forward(X, strategy="interpreter"))
    assert_same_bits(shared, pop.forward(X))  # auto: the same bits whichever it picks
    assert ref.compare(shared, pop, X) < 0.2  # the rest hinge on float32 rounding (test_eval.py)
    for metric in ("mse", "mae", "rmse"):
        for weight in (None, w):
            for scaling in (False, True) if metric != "mae" else (False,):
                got = pop.fitness(X, y, metric, weight=weight, strategy="shared", scaling=scaling)
                assert_same_bits(got, pop.fitness(X, y, metric, weight=weight, strategy="interpreter",
                                                  scaling=scaling))
                assert_same_bits(got, pop.fitness(X, y, metric, weight=weight, scaling=scaling))


def test_shared_subtrees_of_single_nodes_and_modi_roots():
    # leaves alone, a tree twice, a subtree inside another tree, a Modi root that emits and passes its last
    # child up, and a Modi node inside a tree
    pop = Population.from_expressions(
        [["x0", "1.5"], ["x0*x1 + 2", "x0*x1"], ["x0*x1 + 2", "x0*x1"], ["sin(x0*x1)", "x1 - 1.5"]], n_in=2)
    X = torch.tensor([[2.0, 3.0], [-1.0, 0.5], [0.0, 4.0]])
    assert_same_bits(pop.forward(X, strategy="shared"), pop.forward(X, strategy="interpreter"))
    ref.compare(pop.forward(X, strategy="shared"), pop, X)


def test_shared_subtrees_check_trees_as_the_interpreter_does():
    pop = Population.from_expressions(["x0 + x1"], n_in=2)
    kind, code, out, value, size = (t.clone() for t in pop.tensors())
    code[0, 1] = 5  # a variable past n_in
    for sid in (6, 7):
        with pytest.raises(RuntimeError, match="variable index 5 >= n_in 2"):
            torch.ops.gprl.forward(kind, code, out, value, size, torch.zeros(2, 40), 1, 4, sid)
