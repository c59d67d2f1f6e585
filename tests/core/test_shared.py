"""The CPU's shared-subtree evaluation (kernels/subtrees.h): the interpreter's bits on populations that repeat
their subtrees, as evolved ones do."""

import numpy as np
import pytest
import torch

import gprl
from gprl import Population
from tests.core.test_eval import random_population
from tests.reference import evaluator as ref


def bred_population(n_out: int, seed: int, parents: int = 150) -> Population:
    """Random trees (every function, Modi nodes), then three rounds of crossover among them: the children
    carry their parents' subtrees, and some trees repeat whole."""
    pop = random_population(parents, 3, n_out, seed)
    for r in range(3):
        pop = Population.cat([pop, gprl.crossover(pop, seed=seed + r)])
    return pop


def repeated_share(pop: Population) -> float:
    """The share of function nodes whose subtree (node for node, constants by value) occurs earlier in the
    population: what the shared path saves, counted independently of the kernels."""
    kind, code, out, value, size = (t.tolist() for t in pop.tensors())
    seen, functions, repeats = set(), 0, 0
    for k, c, o, v, s in zip(kind, code, out, value, size):
        keys = [None] * s[0]
        for i in range(s[0] - 1, -1, -1):
            children, j = [], i + 1
            while j < i + s[i]:
                children.append(keys[j])
                j += s[j]
            keys[i] = (k[i], c[i], o[i] if k[i] & 4 else 0, v[i] if k[i] & 3 == 2 else 0, tuple(children))
            if k[i] & 3 == 3:
                functions += 1
                repeats += keys[i] in seen
            seen.add(keys[i])
    return repeats / functions


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


def test_shared_subtrees_do_not_depend_on_threads():
    pop = bred_population(2, seed=5, parents=400)
    X = torch.from_numpy(ref.random_inputs(np.random.default_rng(6), (5000, 3)))
    y = torch.randn(5000, 2)
    threads = torch.get_num_threads()
    try:
        runs = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            runs.append((pop.fitness(X, y, strategy="shared"), pop.forward(X, strategy="shared")))
    finally:
        torch.set_num_threads(threads)
    for run in runs[1:]:
        for a, b in zip(runs[0], run):
            assert_same_bits(a, b)


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
