"""SR-fitness throughput: GPops/s = P * mean_tree_size * D / seconds (the EvoGP paper's measure).

Random trees (ramped half-and-half), 8 inputs, {+, -, *, /, sin, cos, tan}; prints one JSON document.
    python scripts/bench_eval.py --device cuda
    python scripts/bench_eval.py --device cpu --pop 100 1000 --rows 60 392
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from gprl import Dataset, Population

FUNCTIONS = ["add", "sub", "mul", "div", "sin", "cos", "tan"]


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def time_call(fn, device: str, repeats: int, budget_s: float) -> float:
    """Median seconds per call after a warm-up; stops early once the budget is spent."""
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    times = []
    start = time.perf_counter()
    for _ in range(repeats):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--pop", type=int, nargs="+", default=[100, 1000, 10_000, 100_000])
    ap.add_argument("--rows", type=int, nargs="+", default=[60, 392, 20_640, 100_000])
    # ramped half-and-half over depths 3..8 gives the reference setup's mean tree size of about 27
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--min-depth", type=int, default=3)
    ap.add_argument("--max-depth", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per cell at most (after warm-up)")
    ap.add_argument("--max-work", type=float, default=float("inf"),
                    help="skip cells whose P*D exceeds this (for slow devices)")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    results = []
    for P in args.pop:
        pop = Population.random(P, 8, max_len=args.max_len, functions=FUNCTIONS, min_depth=args.min_depth,
                                max_depth=args.max_depth,
                                seed=gen, device=args.device)
        mean_size = float(pop.lengths().float().mean())
        for D in args.rows:
            if P * D > args.max_work:
                continue
            # a Dataset is validated and laid out once, as a GP run does for its training data
            data = Dataset(torch.rand(D, 8, generator=gen) * 2 - 1, torch.rand(D, generator=gen), device=args.device)
            seconds = time_call(lambda p=pop, d=data: p.fitness(d), args.device, args.repeats, args.budget)
            results.append({"P": P, "D": D, "mean_size": round(mean_size, 2), "seconds": seconds,
                            "gpops": P * mean_size * D / seconds})
    print(json.dumps({"benchmark": "sr_fitness", "device": device_name(args.device), "torch": torch.__version__,
                      "functions": FUNCTIONS, "n_in": 8, "results": results}, indent=1))


if __name__ == "__main__":
    main()
