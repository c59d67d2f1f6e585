"""Where the time of a small SR-fitness call goes, on CUDA; prints JSON.

For each (P, D) cell of ``scripts/bench_eval.py``'s setup: the time between CUDA events around one call (what
bench_eval measures) of ``Population.fitness`` and of the raw ``gprl::fitness`` op, the same for a bare
``torch.empty`` (the floor of that measurement), the host time per call when calls are queued back to back,
and the GPU time per call of each kernel (``torch.profiler``). With one long kernel ahead in the queue, the
host's own cost per call (``blocked_host_us``: nothing waits for the GPU) and, behind it, the GPU's time per
call once the host runs ahead (``gpu_bound_us``: kernels and the gaps between them). A call whose kernel time
is far below its event time is bound by launch and host overhead; one whose kernel time dominates, by the
kernel. ``floor`` gives the event time of one bare kernel launch (``x.add_(1)``) and of ``torch.empty``.

    python scripts/dev/profile_fitness_calls.py [--cells 100x60 1000x392 ...] [--strategy level warp ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's gprl
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/bench_eval.py: workload and timing
from bench_eval import FUNCTIONS, queued_host_us, time_call

from gprl import Dataset, Population, strategy
from gprl.backend.ops import ops
from gprl.core.population import METRICS


def event_us(fn) -> float:
    """Median microseconds between CUDA events around one call (bench_eval's measure)."""
    return round(time_call(fn, "cuda", repeats=200, budget_s=10.0) * 1e6, 1)


def behind_sleep_us(fn, calls: int = 100) -> tuple[float, float]:
    """(host us per call, GPU us per call) for calls queued behind a ~10 ms long kernel: the host's own cost
    (it never waits for the GPU) and the GPU's time per call with the host ahead of it."""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(20_000_000)  # cycles
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e6
    end.record()
    end.synchronize()
    return round(host, 1), round(start.elapsed_time(end) * 1e3 / calls, 1)


def kernel_us(fn, calls: int = 20) -> dict[str, float]:
    """Device microseconds per call of each kernel fn launches."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    # FunctionEventAvg.device_time is already the mean per occurrence
    return {e.key[:80]: round(e.device_time, 2) for e in prof.key_averages()
            if e.device_type == torch.autograd.DeviceType.CUDA}  # fmt: skip


def profile_cell(P: int, D: int, gen: torch.Generator, name: str | None) -> dict:
    pop = Population.random(P, 8, max_len=256, functions=FUNCTIONS, min_depth=3, max_depth=8, seed=gen,
                            device="cuda")
    data = Dataset(torch.rand(D, 8, generator=gen) * 2 - 1, torch.rand(D, generator=gen), device="cuda")
    sid = strategy.choose("fitness", name, pop.device, P, D, 1, pop.max_len)
    op_args = (*pop.tensors(), data.Xt, data.yt, data.weight, METRICS["mse"], pop.max_stack(), sid)
    blocked_host, gpu_bound = behind_sleep_us(lambda: pop.fitness(data, strategy=name))
    return {
        "strategy": name or strategy.auto("fitness", pop.device, P, D, 1, pop.max_len) or "heuristic",
        "event_us_population_fitness": event_us(lambda: pop.fitness(data, strategy=name)),
        "event_us_op": event_us(lambda: ops.fitness(*op_args)),
        "event_us_torch_empty": event_us(lambda: torch.empty(P, device="cuda")),
        "queued_host_us_population_fitness": queued_host_us(lambda: pop.fitness(data, strategy=name)),
        "blocked_host_us_population_fitness": blocked_host,
        "gpu_bound_us_population_fitness": gpu_bound,
        "kernel_us": kernel_us(lambda: ops.fitness(*op_args)),
        "longest_tree": int(pop.lengths().max()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", nargs="+", default=["100x60", "100x392", "1000x60", "1000x392", "10000x60",
                                                   "10000x392"], help="PxD cells")  # fmt: skip
    ap.add_argument("--strategy", nargs="+", default=[None],
                    help="fixed evaluation strategies, each profiled (default: the automatic choice)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("profile_fitness_calls.py needs a CUDA device "
                         "(the CPU backend has no launches to profile)")
    buf = torch.zeros(16, device="cuda")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "floor": {"event_us_one_launch": event_us(lambda: buf.add_(1)),
                     "event_us_torch_empty": event_us(lambda: torch.empty(0, device="cuda"))},
           "cells": {}}
    for cell in args.cells:
        P, D = (int(x) for x in cell.split("x"))
        for name in args.strategy:
            key = cell if name is None else f"{cell} {name}"
            out["cells"][key] = profile_cell(P, D, torch.Generator().manual_seed(P * 7919 + D), name)
            print(key, json.dumps(out["cells"][key]), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
