"""CUDA kernels against the reference evaluator and against the CPU backend (run with -m gpu)."""

import numpy as np
import pytest
import torch

from gprl import Population
from gprl.functions import BY_NAME
import reference as ref

pytestmark = pytest.mark.gpu
ALL = list(BY_NAME)


def pair(P, n_in, n_out, seed, **kw):
    kw = {"max_len": 48, "functions": ALL, "max_depth": 5, "const_range": (-2, 2), "output_prob": 0.4, **kw}
    cpu = Population.random(P, n_in, n_out, seed=seed, **kw)
    return cpu, cpu.to("cuda")


def assert_close_where_finite(a, b, rtol=1e-5):
    a, b = a.double().cpu(), b.double().cpu()
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    ok = torch.isfinite(a) & torch.isfinite(b)
    torch.testing.assert_close(a[ok], b[ok], rtol=rtol, atol=1e-6)


def test_generate_same_trees_as_cpu_and_repeatable():
    for method in ("grow", "full", "ramped"):
        kw = dict(max_len=256, method=method, max_depth=7, functions=ALL, output_prob=0.5, seed=42)
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
    assert ref.compare(pop.forward(X), pop, X) < 0.05
    Xb = torch.from_numpy(ref.random_inputs(rng, (3400, 5, 4))).cuda()
    assert ref.compare(pop.forward(Xb), pop, Xb) < 0.05


@pytest.mark.parametrize("D", [1, 31, 1000, 8193, 100_003])
@pytest.mark.parametrize("n_out", [1, 3])
def test_forward_and_fitness_equal_cpu(D, n_out):
    cpu, gpu = pair(200, 5, n_out, seed=D, functions=["add", "sub", "mul", "div", "sin", "cos", "tan"])
    X = torch.rand(D, 5) * 4 - 2
    y = torch.randn(D, n_out)
    assert_close_where_finite(gpu.forward(X.cuda()), cpu.forward(X))
    for metric in ("mse", "mae", "rmse"):
        assert_close_where_finite(gpu.fitness(X.cuda(), y.cuda(), metric), cpu.fitness(X, y, metric))
    w = torch.rand(D)
    assert_close_where_finite(gpu.fitness(X.cuda(), y.cuda(), weight=w.cuda()), cpu.fitness(X, y, weight=w))
    Xb = torch.rand(200, 7, 5)
    assert_close_where_finite(gpu.forward(Xb.cuda()), cpu.forward(Xb))


@pytest.mark.parametrize("max_len", [1024, 4096])
def test_long_and_deep_trees_equal_cpu(max_len):
    # full binary trees and left-deep chains exercise every stack bucket
    full = Population.random(64, 3, max_len=max_len, method="full", max_depth=9 if max_len == 1024 else 11,
                             functions=["add", "sub", "mul", "max", "min"], seed=1)
    chain = "x0"
    for k in range(min(max_len // 2 - 1, 1500)):
        chain = f"({chain}) * x{k % 3} " if k % 2 else f"max({chain}, x{k % 3})"
    deep = Population.from_expressions([chain], n_in=3, max_len=max_len)
    X = torch.rand(5000, 3) * 0.5 + 0.5
    y = torch.rand(5000)
    for pop in (full, deep):
        assert_close_where_finite(pop.to("cuda").forward(X.cuda()), pop.forward(X), rtol=1e-4)
        assert_close_where_finite(pop.to("cuda").fitness(X.cuda(), y.cuda()), pop.fitness(X, y), rtol=1e-4)


def test_fitness_deterministic_on_gpu():
    _, pop = pair(1000, 8, 1, seed=9, functions=["add", "sub", "mul", "div", "sin"])
    X, y = torch.randn(100_000, 8, device="cuda"), torch.randn(100_000, device="cuda")
    a = pop.fitness(X, y)
    for _ in range(5):
        assert torch.equal(a, pop.fitness(X, y))


def test_malformed_tree_gives_nan_not_a_crash():
    pop = Population.from_expressions(["x0 + x1"], n_in=2).to("cuda")
    pop.size[0, 0] = 2  # the add lacks a child
    y = torch.ops.gprl.forward(*pop.tensors(), torch.ones(3, 2, device="cuda"), 1, 4)
    assert torch.isnan(y).all()
    assert pop.validate().item() != 0
    torch.cuda.synchronize()


def test_opcheck_cuda():
    from test_core_api import opcheck_all
    opcheck_all("cuda")
