"""Times a full variation step (selection + crossover + mutation + elitism: one GeneticProgramming.step)
and prints JSON. Usage: python scripts/bench_variation.py --device cpu --sizes 1000 10000 [--max-len 512]"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's gprl
import gprl


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bench(P: int, max_len: int, device: str, repeats: int, selection: str) -> dict:
    gp = gprl.GeneticProgramming(4, pop_size=P, max_len=max_len, max_depth=17, init_depth=(2, 8),
                                 selection=selection, elitism=max(1, P // 100), seed=0, device=device)
    pop = gp.init()
    fit = torch.randn(P, generator=torch.Generator().manual_seed(0)).to(device)
    for _ in range(3):  # warm-up; the population settles to its working sizes
        pop = gp.step(pop, fit)
    sync(device)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = gp.step(pop, fit)
        sync(device)
        times.append(time.perf_counter() - t)
    assert int(out.validate().abs().sum()) == 0
    times.sort()
    return {"P": P, "max_len": max_len, "device": device, "selection": selection,
            "median_ms": 1e3 * times[len(times) // 2], "min_ms": 1e3 * times[0],
            "mean_tree_len": float(pop.lengths().float().mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--selection", default="tournament",
                    choices=["tournament", "truncation", "rank", "roulette"])
    a = ap.parse_args()
    machine = torch.cuda.get_device_name() if a.device.startswith("cuda") else platform.processor() or "cpu"
    results = [bench(P, a.max_len, a.device, a.repeats, a.selection) for P in a.sizes]
    print(json.dumps({"benchmark": "variation_step", "machine": machine, "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "results": results}, indent=2))


if __name__ == "__main__":
    main()
