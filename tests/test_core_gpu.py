"""CUDA kernels against the reference evaluator and against the CPU backend (run with -m gpu)."""

import numpy as np
import pytest
import reference as ref
import torch

import gprl
from gprl import Population
from gprl.functions import BY_NAME

pytestmark = pytest.mark.gpu
ALL = list(BY_NAME)


def pair(P, n_in, n_out, seed, **kw):
    kw = {"max_len": 48, "functions": ALL, "max_depth": 5, "const_range": (-2, 2), "output_prob": 0.4, **kw}
    cpu = Population.random(P, n_in, n_out, seed=seed, **kw)
    return cpu, cpu.to("cuda")


def test_generate_same_trees_as_cpu_and_repeatable():
    for method in ("grow", "full", "ramped"):
        kw = {"max_len": 256, "method": method, "max_depth": 7, "functions": ALL, "output_prob": 0.5, "seed": 42}
        cpu = Population.random(5000, 6, 3, **kw)
        a = Population.random(5000, 6, 3, device="cuda", **kw)
        b = Population.random(5000, 6, 3, device="cuda", **kw)
        assert a.equal(b)
        assert a.to("cpu").equal(cpu)
        assert int(a.validate().abs().sum()) == 0


@pytest.mark.parametrize("n_out", [1, 3, 17])
def test_forward_matches_reference(n_out):
    rng = np.random.default_rng(n_out)
    _, pop = pair(3400, 4, n_out, seed=n_out)
    X = torch.from_numpy(ref.random_inputs(rng, (24, 4))).cuda()
    assert ref.compare(pop.forward(X), pop, X) < 0.08
    Xb = torch.from_numpy(ref.random_inputs(rng, (3400, 5, 4))).cuda()
    assert ref.compare(pop.forward(Xb), pop, Xb) < 0.08


# Well-conditioned functions and inputs in [-1, 1]: CPU and CUDA agree to float32 rounding everywhere.
SMOOTH = ["add", "sub", "mul", "sin", "cos", "max", "min"]


@pytest.mark.parametrize("P,D", [(200, 1), (200, 31), (3000, 60), (3000, 392), (200, 1000), (200, 8193),
                                 (50, 100_003), (10, 1_000_000)])
@pytest.mark.parametrize("n_out", [1, 3])
def test_forward_and_fitness_equal_cpu(P, D, n_out):
    # (3000, 60/392) take the warp-per-tree path, the others blocks over rows
    cpu, gpu = pair(P, 5, n_out, seed=D, functions=SMOOTH, max_depth=4)
    X = torch.rand(D, 5) * 2 - 1
    y = torch.randn(D, n_out)
    if D <= 100_003:
        torch.testing.assert_close(gpu.forward(X.cuda()).cpu(), cpu.forward(X), rtol=1e-5, atol=1e-5)
    data_cpu, data_gpu = gprl.Dataset(X, y), gprl.Dataset(X, y, device="cuda")
    for metric in ("mse", "mae", "rmse"):
        torch.testing.assert_close(gpu.fitness(data_gpu, metric=metric).cpu(), cpu.fitness(data_cpu, metric=metric),
                                   rtol=1e-5, atol=1e-6)
    w = torch.rand(D)
    torch.testing.assert_close(gpu.fitness(X.cuda(), y.cuda(), weight=w.cuda()).cpu(),
                               cpu.fitness(X, y, weight=w), rtol=1e-5, atol=1e-6)
    Xb = torch.rand(P, 7, 5) * 2 - 1
    torch.testing.assert_close(gpu.forward(Xb.cuda()).cpu(), cpu.forward(Xb), rtol=1e-5, atol=1e-5)


def left_deep_chain(n_functions: int, max_len: int) -> Population:
    """f(f(...f(x, x)..., x), x) with alternating add/mul: its prefix is n functions then n + 1 leaves, so
    evaluation keeps every leaf on the stack (need = n + 1)."""
    n = n_functions
    kind = np.zeros((1, max_len), np.uint8)
    code = np.zeros((1, max_len), np.int16)
    size = np.zeros((1, max_len), np.int16)
    kind[0, :n] = 3
    code[0, :n] = [BY_NAME["add" if k % 2 else "mul"].id for k in range(n)]
    size[0, :n] = [2 * (n - k) + 1 for k in range(n)]
    kind[0, n:2 * n + 1] = 1
    code[0, n:2 * n + 1] = np.arange(n + 1) % 3
    size[0, n:2 * n + 1] = 1
    t = torch.from_numpy
    return Population(t(kind), t(code), torch.zeros(1, max_len, dtype=torch.uint8), torch.zeros(1, max_len),
                      t(size), n_in=3).check()


@pytest.mark.parametrize("max_len", [1024, 4096])
def test_long_and_deep_trees_equal_cpu(max_len):
    # full binary trees and left-deep chains exercise every stack bucket
    full = Population.random(64, 3, max_len=max_len, method="full", max_depth=9 if max_len == 1024 else 11,
                             functions=["add", "sub", "max", "min"], seed=1)
    deep = left_deep_chain(max_len // 2 - 1, max_len)
    assert deep.max_stack() == max_len // 2
    X = torch.rand(5000, 3) * 0.5 + 0.75
    y = torch.rand(5000)
    for pop in (full, deep):
        torch.testing.assert_close(pop.to("cuda").forward(X.cuda()).cpu(), pop.forward(X), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(pop.to("cuda").fitness(X.cuda(), y.cuda()).cpu(), pop.fitness(X, y),
                                   rtol=1e-4, atol=1e-5)


def test_fitness_deterministic_on_gpu():
    _, pop = pair(1000, 8, 1, seed=9, functions=["add", "sub", "mul", "div", "sin"])
    X, y = torch.randn(100_000, 8, device="cuda"), torch.randn(100_000, device="cuda")
    a = pop.fitness(X, y)
    for _ in range(5):
        assert torch.equal(a, pop.fitness(X, y))


def test_malformed_tree_gives_nan_not_a_crash():
    pop = Population.from_expressions(["x0 + x1"], n_in=2).to("cuda")
    pop.size[0, 0] = 2  # the add lacks a child
    y = torch.ops.gprl.forward(*pop.tensors(), torch.ones(2, 3, device="cuda"), 1, 4)
    assert torch.isnan(y).all()
    assert pop.validate().item() != 0
    torch.cuda.synchronize()


def test_opcheck_cuda():
    from test_core_api import opcheck_all
    opcheck_all("cuda")
