"""Kernel time of gprl::vary per operator (every child made by one operator, with and without the depth
check) and the wall time of a full generation step, on CUDA; prints JSON. It shows which operator or check
dominates a step. Usage: python scripts/dev/profile_vary_ops.py [--pop 100000] [--max-len 512]"""

from __future__ import annotations

import argparse
import json
import time

import torch

import gprl
from gprl.backend.ops import ops
from gprl.evolve.variation import OPS, VariationParams, weights_tensor


def cuda_ms(fn, repeats: int = 20) -> float:
    """Median milliseconds between CUDA events around fn, after a warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pop", type=int, default=100_000)
    ap.add_argument("--max-len", type=int, default=512)
    a = ap.parse_args()
    P, dev = a.pop, "cuda"
    gp = gprl.GeneticProgramming(4, pop_size=P, max_len=a.max_len, max_depth=17, init_depth=(2, 8),
                                 elitism=max(1, P // 100), seed=0, device=dev)
    pop = gp.init()
    fit = torch.randn(P, device=dev)
    for _ in range(3):  # working sizes, as bench_variation.py
        pop = gp.step(pop, fit)
    parent, donor = torch.randint(0, P, (P,), device=dev), torch.randint(0, P, (P,), device=dev)
    zeros = torch.zeros(P, dtype=torch.int32, device=dev)
    w = weights_tensor(VariationParams(), dev)
    per_op = {}
    for name in ("copy", "crossover", "subtree", "hoist", "point", "multipoint", "insert", "delete",
                 "constant"):
        op = torch.full((P,), OPS[name], dtype=torch.int32, device=dev)
        for max_depth in (17, 0):
            per_op[f"{name}/max_depth={max_depth}"] = round(cuda_ms(lambda op=op, md=max_depth: ops.vary(
                *pop.tensors(), *pop.tensors(), parent, donor, op, zeros, zeros, w, 4, 1, md, 4,
                0.1, 0.1, 0.1, 0.2, -1.0, 1.0, 0.3, 0.3, 123)), 4)
    # the step's own mix of operators and parameters, with random parents and with the tournament's winners
    step_args = (*gp._vary_args, 123)
    mix = gp._op_codes[torch.searchsorted(gp._op_cdf, torch.rand(P, device=dev), right=True)]
    winners = ops.tournament(fit, P, gp.tournament_size, 7), ops.tournament(fit, P, gp.tournament_size, 8)
    xo = torch.full((P,), OPS["crossover"], dtype=torch.int32, device=dev)
    mixes = {}
    for ops_name, opv in (("crossover", xo), ("step_mix", mix), ("step_mix_grouped", mix.sort().values)):
        for par_name, (pa, da) in (("random", (parent, donor)), ("tournament", winners)):
            mixes[f"{ops_name}/{par_name}_parents"] = round(cuda_ms(lambda opv=opv, pa=pa, da=da: ops.vary(
                *pop.tensors(), *pop.tensors(), pa, da, opv, zeros, zeros, *step_args)), 4)
    walls, hosts = [], []
    for _ in range(20):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        gp.step(pop, fit)
        hosts.append(time.perf_counter() - t0)  # enqueue time: the host's share of a step
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
    print(json.dumps({"device": torch.cuda.get_device_name(), "P": P, "max_len": a.max_len,
                      "mean_len": float(pop.lengths().float().mean()), "vary_kernel_ms": per_op,
                      "vary_kernel_mix_ms": mixes,
                      "step_wall_ms": 1e3 * sorted(walls)[10], "step_host_ms": 1e3 * sorted(hosts)[10],
                      "step_kernels": profile_steps(gp, pop, fit, device=True),
                      "step_host_ops": profile_steps(gp, pop, fit, device=False)},
                     indent=1))


def profile_steps(gp, pop, fit, device: bool, steps: int = 10) -> list[dict]:
    """A generation step's GPU kernels and copies (``device``: mean microseconds and launches a step) or the
    host's share of it (the torch and gprl ops it calls, mean self microseconds a step), longest first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA if device else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            gp.step(pop, fit)
        torch.cuda.synchronize()
    rows = [{"name": e.key[:90],
             "us": round((e.device_time_total if device else e.self_cpu_time_total) / steps, 1),
             "calls": e.count / steps} for e in prof.key_averages()]
    return sorted([r for r in rows if r["us"] > 0], key=lambda r: -r["us"])[:25]


if __name__ == "__main__":
    main()
