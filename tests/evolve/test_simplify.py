"""Simplification by evaluation (gprl.evolve.simplify), checked against the reference evaluator: the value
each node passes up, and how far the simplified trees' outputs move."""

import numpy as np
import pytest
import torch

import gprl
from gprl.evolve.simplify import node_values, simplify
from tests.evolve.helpers import population
from tests.reference.evaluator import CONST, FUNCS32, OUTPUT_FLAG, VAR, eval_population


def passed_up(kind, code, value, size, i, X):
    """The value node ``i`` hands its parent, walked from the documented Modi semantics: a Modi node passes
    its last child's value up."""
    stack = []
    for j in range(i + int(size[i]) - 1, i - 1, -1):
        k = int(kind[j]) & 3
        if k == VAR:
            stack.append(X[:, int(code[j])])
        elif k == CONST:
            stack.append(np.full(len(X), float(value[j])))
        else:
            arity, fn = FUNCS32[int(code[j])]
            args = [stack.pop() for _ in range(arity)]
            stack.append(args[-1] if int(kind[j]) & OUTPUT_FLAG else fn(*args))
    return stack[0]


def test_node_values_are_what_each_node_passes_up_modi_nodes_included():
    pop = population(12, n_in=3, n_out=3, max_len=40, seed=4)
    X = torch.from_numpy(np.random.default_rng(0).uniform(-2, 2, (64, 3))).float()
    for p in range(len(pop)):
        tree = pop[p]
        kind, code, _, value, size = (t[0].numpy() for t in tree.tensors())
        got = node_values(tree, X).double().numpy()
        assert got.shape == (int(size[0]), 64)
        for i in range(int(size[0])):
            np.testing.assert_allclose(got[i], passed_up(kind, code, value, size, i, X.double().numpy()),
                                       rtol=1e-5, atol=1e-5)


def test_a_branch_never_taken_and_a_tiny_term_go_within_their_tolerance():
    X = torch.from_numpy(np.random.default_rng(1).uniform(-1, 1, (500, 3))).float()
    tree = gprl.Population.from_expressions(["x0 + 0.001*x1 + max(x2, 100.0) + 0.5*sin(x1)"], n_in=3)
    exact = simplify(tree, X, 0.0)  # max(x2, 100) is 100 on every row: the outputs do not move at all
    torch.testing.assert_close(exact.forward(X), tree.forward(X), rtol=0, atol=0)
    assert exact.lengths().item() == tree.lengths().item() - 2
    small = simplify(tree, X, 0.01)  # 0.001 * x1 moves the output by about 6e-4
    assert [str(e) for e in small.to_sympy(0)] == ["x0 + 0.5*sin(x1) + 100.0"]
    assert [str(e) for e in simplify(tree, X, 0.5).to_sympy(0)] == ["x0 + 100.0"]


def test_the_compared_outputs_stay_within_the_tolerance_of_the_original_on_the_rows():
    """Random multi-output trees, their actions compared through tanh: the reference evaluator's outputs of
    every simplified tree move by at most the tolerance (root mean square per output) from the original's,
    also when a larger tolerance goes on from a smaller one's tree; the trees never grow."""
    pop = population(16, n_in=3, n_out=2, max_len=48, seed=7)
    X = torch.from_numpy(np.random.default_rng(2).uniform(-2, 2, (256, 3))).float()
    shortened = 0
    for p in range(len(pop)):
        tree = pop[p]
        original = np.tanh(eval_population(tree, X)[0])
        reference = torch.tanh(tree.forward(X))[0]
        simpler = tree
        for tol in (0.01, 0.05, 0.2):
            simpler = simplify(simpler, X, tol, torch.tanh, reference).check()
            moved = np.sqrt(((np.tanh(eval_population(simpler, X)[0]) - original) ** 2).mean(0)).max()
            assert moved <= tol + 1e-5, (p, tol)
            assert simpler.lengths().item() <= tree.lengths().item()
        shortened += simpler.lengths().item() < tree.lengths().item()
    assert shortened >= len(pop) // 2


def test_simplify_takes_one_tree_and_a_tolerance_of_at_least_zero():
    pop = population(2)
    with pytest.raises(ValueError, match="one tree"):
        simplify(pop, torch.zeros(4, 3), 0.1)
    with pytest.raises(ValueError, match="tolerance"):
        simplify(pop[0], torch.zeros(4, 3), -0.1)
