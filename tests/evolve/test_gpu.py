"""CUDA variation and generation loop: validity, determinism, CPU parity, no host syncs (run with -m gpu)."""

import pytest
import torch

import gprl
from gprl import OPS, GeneticProgramming, VariationParams, vary
from gprl.core.functions import BY_NAME
from tests.evolve.helpers import population, random_rounds

pytestmark = pytest.mark.gpu
ALL = list(BY_NAME)


def test_one_million_random_applications_stay_valid_on_gpu():
    pop = population(20000, n_in=3, n_out=3, max_len=64, seed=11, device="cuda")
    random_rounds(pop, 50, seed=12, device="cuda")


@pytest.mark.parametrize("n_out", [1, 3])
def test_every_operator_equals_cpu(n_out):
    cpu = gprl.Population.random(3000, 3, n_out, max_len=64, functions=ALL, max_depth=6, seed=1)
    gpu = cpu.to("cuda")
    params = VariationParams(functions=ALL, max_depth=9, multi_prob=0.3)
    for name in OPS:
        idx = torch.arange(3000)
        kw = {"donor": idx.flip(0), "node": idx % 7, "donor_node": idx % 5}
        a = vary(cpu, name, params=params, seed=5, **kw)
        b = vary(gpu, name, params=params, seed=5, **{k: v.cuda() for k, v in kw.items()}).to("cpu")
        assert_same_trees(a, b, name)
        assert b.validate().abs().sum() == 0


def assert_same_trees(a, b, what=""):
    """Same structure bit for bit; constants equal up to the last bits (CUDA's logf/cosf in Box-Muller and
    FMA contraction of the uniform constant may round differently from the CPU)."""
    b = b.to("cpu")
    for x, y, field in zip(a.tensors(), b.tensors(), ("kind", "code", "out", "value", "size")):
        if field == "value":
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(x, y), f"{what}: {field} differs"


def test_uniform_equals_cpu():
    assert torch.equal(torch.ops.gprl.uniform(torch.zeros(1, device="cuda"), 10000, 7).cpu(),
                       torch.ops.gprl.uniform(torch.zeros(1), 10000, 7))


def _run(device, seed, gens=50):
    X = torch.linspace(-1, 1, 20, device=device)[:, None]
    y = (X ** 4 + X ** 3 + X ** 2 + X)[:, 0]
    gp = GeneticProgramming(1, pop_size=2000, max_len=64, max_depth=12, seed=seed, device=device)
    pop = gp.init()
    for _ in range(gens):
        pop = gp.step(pop, pop.fitness(X, y))
    return pop


def test_same_seed_same_population_on_gpu():
    a = _run("cuda", 3)
    assert a.equal(_run("cuda", 3))
    assert a.validate().abs().sum() == 0


def test_generation_step_equals_cpu_given_the_same_fitness():
    gp_c = GeneticProgramming(2, pop_size=5000, max_len=64, seed=9, const_sigma=0.0)
    gp_g = GeneticProgramming(2, pop_size=5000, max_len=64, seed=9, const_sigma=0.0, device="cuda")
    pop_c = gp_c.init()
    pop_g = gp_g.init()
    for _ in range(5):
        assert_same_trees(pop_c, pop_g)
        fit = torch.randn(len(pop_c), generator=torch.Generator().manual_seed(len(pop_c)))
        pop_c, pop_g = gp_c.step(pop_c, fit), gp_g.step(pop_g, fit.cuda())


def test_step_has_no_host_sync():
    gp = GeneticProgramming(2, pop_size=100_000, max_len=128, seed=0, device="cuda")
    pop = gp.init()
    fit = torch.randn(len(pop), device="cuda")
    pop = gp.step(pop, fit)  # warm-up: caches
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pop = gp.step(pop, fit)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert pop.validate().abs().sum() == 0


def test_opcheck_vary_cuda():
    pop = gprl.Population.random(64, 2, 2, max_len=32, seed=0, device="cuda")
    i = torch.arange(64, device="cuda")
    z = torch.zeros(64, dtype=torch.int32, device="cuda")
    op = (i % len(OPS)).int()
    args = (*pop.tensors(), *pop.tensors(), i, i.flip(0), op, z, z, torch.ones(len(ALL), device="cuda"), 2, 2,
            8, 4, 0.1, 0.2, 0.1, 0.2, -1.0, 1.0, 0.3, 0.3, 5)
    torch.library.opcheck(torch.ops.gprl.vary, args)


def test_es_and_every_output_equal_cpu():
    """The constants' evolution strategy and every-output initialisation give the CPU's trees on CUDA."""
    def run(device):
        gp = GeneticProgramming(3, 3, pop_size=600, max_len=48, functions=["add", "mul", "sin", "max"],
                                init_every_output=True, es_share=0.2, es_pairs=4, seed=4, device=device)
        pop, X = gp.init(), torch.linspace(-1, 1, 90, device=device).view(30, 3)
        for _ in range(6):
            out = pop.forward(X)
            pop = gp.step(pop, (out - X.sum(1, keepdim=True)).pow(2).mean((1, 2)).nan_to_num(1e6))
        return pop

    assert_same_trees(run("cpu"), run("cuda"), "es")
