"""Kernel-level profile of one generation step and of SR fitness calls (torch.profiler; CUDA machine).

    python scripts/dev/profile_gpu.py --pop 100000 --max-len 512
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import gprl


def show(title: str, fn, repeats: int) -> None:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    print(f"== {title} ({repeats} calls)")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pop", type=int, default=100_000)
    ap.add_argument("--max-len", type=int, default=512)
    a = ap.parse_args()
    gp = gprl.GeneticProgramming(4, pop_size=a.pop, max_len=a.max_len, max_depth=17, init_depth=(2, 8),
                                 elitism=max(1, a.pop // 100), seed=0, device="cuda")
    pop = gp.init()
    fit = torch.randn(a.pop, device="cuda")
    show("GeneticProgramming.step", lambda: gp.step(pop, fit), 10)
    small = gprl.Population.random(100, 8, functions=["add", "sub", "mul", "div", "sin", "cos", "tan"],
                                   min_depth=3, max_depth=8, max_len=256, seed=0, device="cuda")
    data = gprl.Dataset(torch.rand(60, 8), torch.rand(60), device="cuda")
    show("fitness P=100 D=60", lambda: small.fitness(data), 50)
    big = gprl.Population.random(100_000, 8, functions=["add", "sub", "mul", "div", "sin", "cos", "tan"],
                                 min_depth=3, max_depth=8, max_len=256, seed=0, device="cuda")
    data = gprl.Dataset(torch.rand(392, 8), torch.rand(392), device="cuda")
    show("fitness P=100000 D=392", lambda: big.fitness(data), 10)


if __name__ == "__main__":
    main()
