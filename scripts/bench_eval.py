"""SR-fitness throughput: GPops/s = P * mean_tree_size * D / seconds (the EvoGP paper's measure).

Random trees (ramped half-and-half), 8 inputs, {+, -, *, /, sin, cos, tan}; prints one JSON document.
    python scripts/bench_eval.py --device cuda
    python scripts/bench_eval.py --device cpu --pop 100 1000 --rows 60 392

--evolved (CPU): the CPU strategies (gprl.strategy: interpreter, shared subtrees, auto) on the populations of
a real regression run, SymbolicRegressor on Feynman I.9.18 with 10,000 training rows: generations within
--seconds under each, whether --generations generations give the same model under each (they must: the
strategies give the same bits), and at generations 1, 10 and 100 the share of function nodes that repeat a
subtree already in the population and the fitness call's time under each strategy:
    python scripts/bench_eval.py --evolved --seconds 60

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

import numpy as np
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


def repeated_share(pop: Population) -> float:
    """The share of function nodes whose subtree (node for node, constants by value) occurs earlier in the
    population: the evaluations per row the shared strategy saves."""
    kind, code, out, value, size = (t.tolist() for t in pop.tensors())
    seen, functions, repeats = set(), 0, 0
    for k, c, o, v, s in zip(kind, code, out, value, size):
        keys = [None] * s[0]
        for i in range(s[0] - 1, -1, -1):
            children, j = [], i + 1
            while j < i + s[i]:
                children.append(keys[j])
                j += s[j]
            keys[i] = (k[i], c[i], o[i] if k[i] & 4 else 0, v[i] if k[i] & 3 == 2 else 0, tuple(children))
            if k[i] & 3 == 3:
                functions += 1
                repeats += keys[i] in seen
            seen.add(keys[i])
    return repeats / functions


def evolved(args) -> dict:
    """The CPU strategies on a real regression run (--evolved)."""
    import gprl
    from gprl.sr.estimators import SymbolicRegressor

    cpu = ("interpreter", "shared", None)  # None: auto
    recorded: dict[int, Population] = {}

    class Recorded(SymbolicRegressor):  # keeps the populations of generations 1, 10 and 100
        def _report(self, generation, factor):
            if generation.number in (1, 10, 100):
                recorded[generation.number] = generation.populations[0].clone()
            return super()._report(generation, factor)

    data = gprl.datasets.load("feynman_I_9_18", n_samples=12_500, test_size=0.2, seed=0)
    X, y = data.X_train, data.y_train

    def fit(name, **kw):
        gprl.set_strategy(name)
        try:
            return Recorded(random_state=0, device="cpu", callback=lambda _: None, **kw).fit(X, y)
        finally:
            gprl.set_strategy(None)

    timed = {}
    for name in cpu:
        model = fit(name, generations=10**9, time_limit=args.seconds)
        timed[name or "auto"] = {"generations": model.n_generations_,
                                 "search_seconds": round(model.search_seconds_, 2)}
        print(f"{name or 'auto'}: {model.n_generations_} generations in {args.seconds:g} s", file=sys.stderr,
              flush=True)
    fixed = [fit(name, generations=args.generations) for name in cpu]  # the auto run records the populations
    first = fixed[0]
    same = all(m.equations_.equals(first.equations_) and np.array_equal(m.predict(X), first.predict(X))
               for m in fixed[1:])
    # the training rows as the search sees them (the estimator's own scaling does not change the work)
    train = Dataset(torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32))
    cells = []
    for g, pop in sorted(recorded.items()):
        seconds = {name or "auto": time_call(lambda p=pop, s=name: p.fitness(train, strategy=s), "cpu",
                                             args.repeats, args.budget) for name in cpu}
        cells.append({"generation": g, "P": len(pop), "function_nodes": int((pop.kind & 3 == 3).sum()),
                      "repeated_share": round(repeated_share(pop), 4), "seconds": seconds,
                      "interpreter_over_auto": round(seconds["interpreter"] / seconds["auto"], 2)})
        print(f"generation {g}: {cells[-1]['repeated_share']:.1%} repeated, fitness {seconds}",
              file=sys.stderr, flush=True)
    return {"benchmark": "cpu_strategies_evolved", "device": device_name("cpu"), "torch": torch.__version__,
            "dataset": "feynman_I_9_18", "train_rows": len(X), "population_size": first.population_size,
            "seconds": args.seconds, "generations_within_seconds": timed,
            "auto_over_interpreter_generations": round(timed["auto"]["generations"]
                                                       / timed["interpreter"]["generations"], 2),
            "fixed_generations": args.generations, "same_model_under_every_strategy": bool(same),
            "populations": cells}


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
    ap.add_argument("--evolved", action="store_true",
                    help="the CPU strategies on a SymbolicRegressor run on Feynman I.9.18 (10,000 rows)")
    ap.add_argument("--seconds", type=float, default=60.0, help="with --evolved: the time limit of a fit")
    ap.add_argument("--generations", type=int, default=100,
                    help="with --evolved: generations of the fits compared (>= 100 records all three)")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    if args.evolved:
        if args.seconds <= 0 or args.generations < 1:
            ap.error("--seconds must be > 0 and --generations >= 1")
        print(json.dumps(evolved(args), indent=1))
        return
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
