"""CUDA kernels against the reference evaluator and against the CPU backend (run with -m gpu)."""

import numpy as np
import pytest
import torch

import gprl
from gprl import Population, strategy
from gprl.core.functions import BY_NAME
from tests.backend.helpers import opcheck_all
from tests.reference import evaluator as ref

pytestmark = pytest.mark.gpu
ALL = list(BY_NAME)


def pair(P, n_in, n_out, seed, **kw):
    kw = {"max_len": 48, "functions": ALL, "max_depth": 5, "const_range": (-2, 2), "output_prob": 0.4, **kw}
    cpu = Population.random(P, n_in, n_out, seed=seed, **kw)
    return cpu, cpu.to("cuda")


def test_generate_same_trees_as_cpu_and_repeatable():
    for method in ("grow", "full", "ramped"):
        kw = {"max_len": 256, "method": method, "max_depth": 7, "functions": ALL, "output_prob": 0.5,
              "seed": 42}
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
        torch.testing.assert_close(gpu.fitness(data_gpu, metric=metric).cpu(),
                                   cpu.fitness(data_cpu, metric=metric), rtol=1e-5, atol=1e-6)
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
        torch.testing.assert_close(pop.to("cuda").forward(X.cuda()).cpu(), pop.forward(X),
                                   rtol=1e-4, atol=1e-5)
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
    opcheck_all("cuda")


# ---- evaluation strategies (gprl/backend/strategy.py, kernels/strategy.h) ----
FIT, FWD = strategy.names("fitness"), strategy.names("forward")


def assert_close(actual, expected, what, atol=1e-6):
    # <= 1e-5 relative; NaN positions must be equal (the protected functions make NaN rare on valid trees)
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=atol, equal_nan=True,
                               msg=lambda e: f"{what}: {e}")


def edge_trees(max_len: int, n_out: int) -> Population:
    """A one-node variable tree, a one-node constant tree and a tree of exactly max_len nodes: sin over a
    left-deep chain (the chain keeps (max_len - 2) / 2 + 1 values on the stack)."""
    chain = left_deep_chain((max_len - 2) // 2, max_len)
    kind, code, out, value, size = (x.clone().roll(1, dims=1) for x in chain.tensors())
    kind[0, 0], code[0, 0], out[0, 0], value[0, 0], size[0, 0] = 3, BY_NAME["sin"].id, 0, 0.0, max_len
    kind, code, out, value, size = (torch.cat([x, torch.zeros_like(x), torch.zeros_like(x)]) for x in
                                    (kind, code, out, value, size))
    kind[1, 0], code[1, 0], size[1, 0] = 1, 4, 1  # x4
    kind[2, 0], value[2, 0], size[2, 0] = 2, 0.25, 1  # 0.25
    pop = Population(kind, code, out, value, size, n_in=5, n_out=n_out).check()
    assert int(pop.lengths()[0]) == max_len and int(pop.lengths()[1]) == 1
    return pop


def with_edges(P, n_out, max_len, depth, seed):
    pop = Population.random(P, 5, n_out, max_len=max_len, max_depth=depth, functions=SMOOTH, output_prob=0.4,
                            seed=seed)
    return Population.cat([pop, edge_trees(max_len, n_out)])


# (P, D, max_len, max_depth): D from 1 to 100_000, trees up to max_len 1024 (stacks past 256: 1 row per
# thread); from 256 trees, whole-tree blocks take the trees longest first (5,000: the sort's threads hold two
# chunks)
STRATEGY_CASES = [(300, 1, 64, 5), (300, 37, 1024, 9), (257, 1000, 256, 8), (100, 5000, 1024, 9),
                  (2100, 1000, 64, 6), (5000, 392, 64, 6), (40, 100_000, 1024, 9)]


@pytest.mark.parametrize("P,D,max_len,depth", STRATEGY_CASES)
@pytest.mark.parametrize("n_out", [1, 3])
def test_every_strategy_equals_cpu_and_is_deterministic(P, D, max_len, depth, n_out):
    cpu = with_edges(P, n_out, max_len, depth, seed=D)
    gpu = cpu.to("cuda")
    g = torch.Generator().manual_seed(D)  # torch's default generator is seeded anew in every process
    X, y = torch.rand(D, 5, generator=g) * 2 - 1, torch.randn(D, n_out, generator=g)
    w = torch.rand(D, generator=g) + 0.01
    data, data_g = gprl.Dataset(X, y), gprl.Dataset(X, y, device="cuda")
    wdata, wdata_g = gprl.Dataset(X, y, w), gprl.Dataset(X, y, w, device="cuda")
    metrics = (("mse", False), ("mae", False), ("rmse", False), ("mse", True), ("rmse", True))
    expect = {m: cpu.fitness(data, metric=m[0], scaling=m[1]) for m in metrics}
    expect_w = {sc: cpu.fitness(wdata, metric="rmse", scaling=sc) for sc in (False, True)}
    for s in (None, *FIT):
        if s == "warp" and n_out > 1:
            with pytest.raises(ValueError, match="single-output"):
                gpu.fitness(data_g, strategy=s)
            with pytest.raises(RuntimeError, match="single-output"):
                torch.ops.gprl.fitness(*gpu.tensors(), data_g.Xt, data_g.yt, None, 0, gpu.max_stack(), 1)
            continue
        for m, sc in metrics:
            a = gpu.fitness(data_g, metric=m, strategy=s, scaling=sc)
            assert torch.equal(a, gpu.fitness(data_g, metric=m, strategy=s, scaling=sc)), (s, m, sc)
            assert_close(a, expect[m, sc], f"fitness {s} {m} scaling={sc}")
        for sc in (False, True):
            assert_close(gpu.fitness(wdata_g, metric="rmse", strategy=s, scaling=sc), expect_w[sc],
                         f"fitness {s} weighted scaling={sc}")
    expect_y = cpu.forward(X)
    Xg = X.cuda()
    # Trees of up to 1,024 nodes: the CPU's and CUDA's sin/exp/... differ by ulps, which add up along the
    # chain; a prediction that cancels to ~1e-3 keeps the absolute error of its unit-sized operands (seen on
    # the H100: 1.8e-6 on one of 1.5 M predictions), so absolute 1e-5 there.
    atol = 1e-5 if max_len > 256 else 1e-6
    first = None
    for s in (None, *FWD):
        Y = gpu.forward(Xg, strategy=s)
        assert torch.equal(Y, gpu.forward(Xg, strategy=s)), s
        assert_close(Y, expect_y, f"forward {s}", atol=atol)
        # same functions on the same operands, outputs summed in the same order: equal bits across strategies
        first = Y if first is None else first
        torch.testing.assert_close(Y, first, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda e, s=s: f"forward {s}: {e}")


@pytest.mark.parametrize("n_out", [17, 60, 200])
def test_many_outputs_every_strategy(n_out):
    # multi-output fitness keeps threads x rows x n_out floats in shared memory (96 KiB): a hybrid strategy
    # over it is an error (Python and C++), auto falls back to fewer rows
    cpu = Population.random(150, 4, n_out, max_len=128, max_depth=7, functions=SMOOTH, output_prob=0.6,
                            seed=n_out)
    gpu = cpu.to("cuda")
    X, y = torch.rand(1500, 4) * 2 - 1, torch.randn(1500, n_out)
    data_g = gprl.Dataset(X, y, device="cuda")
    expect, expect_y = cpu.fitness(X, y), cpu.forward(X)
    assert_close(gpu.fitness(data_g), expect, "fitness auto")
    for s in (s for s in FIT if s != "warp"):
        if strategy.unavailable("fitness", s, 1500, n_out):
            with pytest.raises(ValueError, match="shared memory"):
                gpu.fitness(data_g, strategy=s)
            with pytest.raises(RuntimeError, match="shared memory"):
                torch.ops.gprl.fitness(*gpu.tensors(), data_g.Xt, data_g.yt, None, 0, gpu.max_stack(),
                                       strategy.IDS[s])
        else:
            assert_close(gpu.fitness(data_g, strategy=s), expect, f"fitness {s}")
    for s in FWD:
        assert_close(gpu.forward(X.cuda(), strategy=s), expect_y, f"forward {s}")


def test_invalid_strategy_ids_raise_on_cuda():
    _, pop = pair(50, 3, 1, seed=3)
    Xt, yt = torch.rand(3, 70, device="cuda"), torch.rand(1, 70, device="cuda")
    ops = torch.ops.gprl
    for bad in (0, 8, -2, 1 << 40):
        with pytest.raises(RuntimeError, match=r"valid ids: -1 \(auto\), 1 \(warp\)"):
            ops.fitness(*pop.tensors(), Xt, yt, None, 0, pop.max_stack(), bad)
    for bad in (0, 1, 8, -2):
        with pytest.raises(RuntimeError, match=r"valid ids: -1 \(auto\), 2 \(hybrid_r1\)"):
            ops.forward(*pop.tensors(), Xt, 1, pop.max_stack(), bad)
    for cpu_only in (6, 7):  # shared, interpreter
        with pytest.raises(RuntimeError, match=r"evaluates on the CPU only; valid ids on a CUDA device: -1"):
            ops.fitness(*pop.tensors(), Xt, yt, None, 0, pop.max_stack(), cpu_only)
        with pytest.raises(RuntimeError, match=r"evaluates on the CPU only"):
            ops.forward(*pop.tensors(), Xt, 1, pop.max_stack(), cpu_only)
    torch.cuda.synchronize()  # nothing was launched: the device is still fine
    assert torch.isfinite(ops.fitness(*pop.tensors(), Xt, yt, None, 0, pop.max_stack(), 1)).all()


@pytest.mark.parametrize("copies", [1, 75])  # 300 trees: the kernels take them longest first (longest_first)
def test_malformed_trees_give_nan_for_every_strategy(copies):
    pop = Population.from_expressions(["x0 + x1", "x0 * x1", "x1", "x0"], n_in=2, max_len=3).to("cuda")
    pop.size[0, 0] = 2  # the add lacks a child
    pop.size[3, 0] = 3000  # past max_len: staged or read, its nodes would run past the population
    pop = Population.cat([pop] * copies)
    ops = torch.ops.gprl
    Xt, yt = torch.ones(2, 70, device="cuda"), torch.zeros(1, 70, device="cuda")
    for s in FIT:
        sid = strategy.IDS[s]
        f = ops.fitness(*pop.tensors(), Xt, yt, None, 0, 4, sid).view(copies, 4)
        assert torch.isnan(f[:, 0]).all() and torch.isnan(f[:, 3]).all(), s
        assert (f[:, 1] == 1.0).all() and (f[:, 2] == 1.0).all(), s
        if s in FWD:
            Y = ops.forward(*pop.tensors(), Xt, 1, 4, sid).view(copies, 4, 70)
            assert torch.isnan(Y[:, 0]).all() and torch.isnan(Y[:, 3]).all(), s
            assert (Y[:, 1] == 1.0).all() and (Y[:, 2] == 1.0).all(), s
    Yb = ops.forward_batched(*pop.tensors(),
                             torch.ones(4 * copies, 5, 2, device="cuda"), 1, 4).view(copies, 4, 5)
    assert torch.isnan(Yb[:, 0]).all() and torch.isnan(Yb[:, 3]).all() and (Yb[:, 1] == 1.0).all()
    torch.cuda.synchronize()


def test_auto_choice_is_the_argmin_of_the_calibrated_table():
    dev = torch.device("cuda", 0)
    for op in strategy.OP_STRATEGIES:
        m = strategy.model(dev, op)
        assert m.has(op), f"calibrating {op} failed (see the warning)"
        gp, gd = strategy.PROBE_P, strategy.PROBE_D
        for s, grid in m.tables[op]["seconds"].items():
            for i, P in enumerate(gp):
                for j, D in enumerate(gd):
                    if P * D <= strategy.MAX_PROBE_WORK:
                        assert grid[i][j] is not None and 0 < grid[i][j] < 10, (op, s, P, D)
        assert set(m.tables[op]["output_factor"]) == set(strategy.names(op)) - {"warp"}
        for P in (*gp, 128, 4096, 1 << 18):  # powers of two: their own P bucket's size
            for D in (*gd, 1, 3, 37, 60, 392, 5000, 20_640, 100_000):
                for n_out in (1, 3, 64):
                    assert strategy.auto(op, dev, P, D, n_out) == m.best(op, P, D, n_out), (op, P, D, n_out)
