"""Is a small SR-fitness call's kernel time set by its longest trees? CUDA only; prints JSON.

Per (P, D) cell of ``scripts/bench_eval.py``'s workload and per strategy, the GPU microseconds per call with
the host ahead of the GPU (``profile_fitness_calls.behind_sleep_us``) for the population as it is, sorted
longest first or shortest first, with its 1% longest trees replaced by a median tree, and for those 1% alone.

    python scripts/dev/profile_long_trees.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's gprl
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/bench_eval.py
from bench_eval import FUNCTIONS
from profile_fitness_calls import behind_sleep_us

from gprl import Dataset, Population

CELLS = [(10000, 60), (1000, 60), (1000, 392), (100, 60)]
STRATEGIES = [None, "warp", "hybrid_r1", "hybrid_r2", "level"]


def profile_cell(P: int, D: int) -> dict:
    gen = torch.Generator().manual_seed(P * 7919 + D)
    pop = Population.random(P, 8, max_len=256, functions=FUNCTIONS, min_depth=3, max_depth=8, seed=gen,
                            device="cuda")
    data = Dataset(torch.rand(D, 8, generator=gen) * 2 - 1, torch.rand(D, generator=gen), device="cuda")
    lengths = pop.lengths()
    order = torch.argsort(lengths, descending=True)
    top = max(1, P // 100)
    without_top = order.clone()
    without_top[:top] = order[P // 2]  # the longest 1% replaced by a median tree
    variants = {"as_is": pop, "desc": pop[order], "asc": pop[order.flip(0)], "no_top1pct": pop[without_top],
                "top1pct_only": pop[order[:top]]}
    quantiles = torch.tensor([0.5, 0.9, 0.99, 0.999], device="cuda")
    cell = {"len_max": int(lengths.max()),
            "len_q50_90_99_999": torch.quantile(lengths.float(), quantiles).tolist(),
            "mean": float(lengths.float().mean())}
    for strat in STRATEGIES:
        for name, p in variants.items():
            try:
                cell[f"{strat or 'auto'} {name}"] = behind_sleep_us(
                    lambda p=p, s=strat: p.fitness(data, strategy=s))[1]
            except (RuntimeError, ValueError) as e:  # a strategy this shape cannot run
                cell[f"{strat or 'auto'} {name}"] = str(e)[:80]
    return cell


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("profile_long_trees.py needs a CUDA device")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for P, D in CELLS:
        out[f"{P}x{D}"] = profile_cell(P, D)
        print(P, D, json.dumps(out[f"{P}x{D}"]), file=sys.stderr, flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
