"""SR-fitness throughput: GPops/s = P * mean_tree_size * D / seconds (the EvoGP paper's measure).

Random trees (ramped half-and-half), 8 inputs, {+, -, *, /, sin, cos, tan}; prints one JSON document.
    python scripts/bench_eval.py --device cuda
    python scripts/bench_eval.py --device cpu --pop 100 1000 --rows 60 392

--strategies (CUDA): per cell, every fixed evaluation strategy (gprl.strategy) and the automatic choice;
reports the best fixed one, the auto choice and auto/best (1.0: auto is as fast as the best fixed strategy).
--op forward does the same for predictions over the shared rows:
    python scripts/bench_eval.py --strategies
    python scripts/bench_eval.py --strategies --op forward --pop 1000 10000 --rows 64 4096
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch

from gprl import Dataset, Population

FUNCTIONS = ["add", "sub", "mul", "div", "sin", "cos", "tan"]


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"


def time_call(fn, device: str, repeats: int, budget_s: float, warm_up: bool = True) -> float:
    """Median seconds per call (after a warm-up call unless warm_up=False); stops early once the budget is
    spent."""
    if warm_up:
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


def queued_host_us(fn, calls: int = 2000) -> float:
    """Host microseconds per CUDA call with calls queued back to back
    (the GPU's time once its queue fills)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return round((t1 - t0) / calls * 1e6, 1)


def time_interleaved(calls: dict, repeats: int, budget_s: float) -> dict:
    """Median seconds per call of each CUDA call, timed in rounds (one call of each per round) so that clock
    and memory-pool drift falls on all of them alike; after the first round, a call slower than 8x the
    fastest (it has lost the cell anyway) is dropped with its first time."""
    for fn in calls.values():  # one warm-up call each
        fn()
    torch.cuda.synchronize()
    times = {name: [] for name in calls}
    live = dict(calls)
    start = time.perf_counter()
    for r in range(repeats):
        for name, fn in live.items():
            times[name].append(time_call(fn, "cuda", 1, float("inf"), warm_up=False))
        if r == 0:
            fastest = min(t[0] for t in times.values())
            live = {n: fn for n, fn in live.items() if times[n][0] <= 8 * fastest}
        if time.perf_counter() - start > budget_s:
            break
    return {name: statistics.median(t) for name, t in times.items()}


def back_to_back(fn, n: int) -> float:
    """Wall seconds per call over n calls in a row (host overhead and kernels overlap, as in a GP loop)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n


def strategy_cells(args, gen: torch.Generator) -> dict:
    """Every fixed strategy and the automatic choice, per (P, D) cell."""
    from gprl import strategy

    dev = torch.device(args.device)
    op = args.op
    cached = op in strategy.load_tables(torch.cuda.get_device_name(dev))
    t0 = time.perf_counter()
    model = strategy.model(dev, op)  # calibrates on first use (unless cached)
    calibration_s = time.perf_counter() - t0
    cells = []
    for P in args.pop:
        pop = Population.random(P, 8, max_len=args.max_len, functions=FUNCTIONS, min_depth=args.min_depth,
                                max_depth=args.max_depth, seed=gen, device=dev)
        mean_size = float(pop.lengths().float().mean())
        for D in args.rows:
            if P * D > args.max_work or (op == "forward" and P * D > 1 << 28):  # forward: <= 1 GiB of outputs
                continue
            if op == "fitness":
                data = Dataset(torch.rand(D, 8, generator=gen) * 2 - 1, torch.rand(D, generator=gen),
                               device=dev)
                call = lambda s, p=pop, d=data: p.fitness(d, strategy=s)
            else:
                X = (torch.rand(D, 8, generator=gen) * 2 - 1).to(dev)
                # no finiteness scan of X: it waits for the GPU and is not part of the evaluation
                call = lambda s, p=pop, x=X: p.forward(x, strategy=s, check_finite=False)
            auto = strategy.auto(op, dev, P, D) or "heuristic"
            calls = ({"auto": lambda c=call: c(None)}
                     | {s: lambda c=call, s=s: c(s) for s in strategy.names(op)})
            seconds = time_interleaved(calls, args.repeats, args.budget)
            fixed = {s: t for s, t in seconds.items() if s != "auto"}
            best = min(fixed, key=fixed.get)
            # pick_over_best: the fixed strategy auto runs, timed as such, over the best (the model's error);
            # auto_over_best: the auto call itself (adds the choice's host cost and the timing noise)
            picked = fixed.get(auto, seconds["auto"])
            cell = {"P": P, "D": D, "mean_size": round(mean_size, 2), "auto": auto, "best": best,
                    "auto_over_best": round(seconds["auto"] / fixed[best], 3),
                    "pick_over_best": round(picked / fixed[best], 3),
                    "gpops_auto": P * mean_size * D / seconds["auto"],
                    "seconds": seconds,
                    "predicted_seconds": {s: model.predict(op, s, P, D, mean_len=mean_size)
                                          for s in strategy.names(op)}
                    if model.has(op) else None}
            if seconds["auto"] < 1e-3:  # small cells: the per-call cost when calls run back to back
                cell["back_to_back_seconds"] = back_to_back(lambda c=call: c(None), 300)
            cells.append(cell)
            print(f"P={P} D={D}: best {best} {fixed[best] * 1e6:.1f} us, auto {auto} "
                  f"{seconds['auto'] * 1e6:.1f} us ({cell['auto_over_best']}; "
                  f"picked fixed {cell['pick_over_best']})", file=sys.stderr, flush=True)
    return {"benchmark": f"{op}_strategies", "device": device_name(args.device), "torch": torch.__version__,
            "functions": FUNCTIONS, "n_in": 8, "calibration_seconds": round(calibration_s, 3),
            "calibration_cached": cached, "cells": cells,
            "worst_auto_over_best": max((c["auto_over_best"] for c in cells), default=None),
            "worst_pick_over_best": max((c["pick_over_best"] for c in cells), default=None)}


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
    ap.add_argument("--strategies", action="store_true",
                    help="time every fixed evaluation strategy and the automatic choice per cell (CUDA)")
    ap.add_argument("--op", choices=["fitness", "forward"], default="fitness",
                    help="with --strategies: the op to time")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    if args.strategies:
        if args.device != "cuda":
            ap.error("--strategies needs a CUDA device: strategies are CUDA mappings")
        if "--budget" not in sys.argv:
            args.budget = 1.5  # per cell, over all its strategies
        if "--repeats" not in sys.argv:
            args.repeats = 50  # rounds; cells of ~100 us vary by 10% from call to call
        print(json.dumps(strategy_cells(args, gen), indent=1))
        return
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
            data = Dataset(torch.rand(D, 8, generator=gen) * 2 - 1, torch.rand(D, generator=gen),
                           device=args.device)
            seconds = time_call(lambda p=pop, d=data: p.fitness(d), args.device, args.repeats, args.budget)
            results.append({"P": P, "D": D, "mean_size": round(mean_size, 2), "seconds": seconds,
                            "gpops": P * mean_size * D / seconds})
    print(json.dumps({"benchmark": "sr_fitness", "device": device_name(args.device),
                      "torch": torch.__version__, "functions": FUNCTIONS, "n_in": 8, "results": results},
                     indent=1))


if __name__ == "__main__":
    main()
