"""Depths of the initial every-output trees that the training app makes (``GeneticProgramming.init`` with
``init_every_output``, the gp defaults: 1,000 trees, max_len 64, init_depth [1, 4], max_depth 8), per number
of outputs: ``python scripts/dev/every_output_depths.py 2 3 6 8 17 > depths.json``."""

import json
import sys

import torch

from gprl.evolve.algorithm import GeneticProgramming

FUNCTIONS = ["add", "sub", "mul", "div", "tanh", "max", "min", "gt"]


def main(outputs: list[int], seeds=(0, 1, 2), n_in: int = 17) -> dict:
    res = {}
    for n_out in outputs:
        r = res[n_out] = {"depth_hist": {}, "over_max_depth": [], "mean_depth": [], "mean_len": []}
        for seed in seeds:
            gp = GeneticProgramming(n_in, n_out, pop_size=1000, functions=FUNCTIONS, max_len=64,
                                    init_depth=(1, 4), max_depth=8, init_every_output=True, output_prob=0.5,
                                    seed=seed)
            pop = gp.init()
            d = pop.depths()
            for v, c in zip(*torch.unique(d, return_counts=True)):
                r["depth_hist"][int(v)] = r["depth_hist"].get(int(v), 0) + int(c)
            r["over_max_depth"].append(float((d > 8).float().mean()))
            r["mean_depth"].append(float(d.float().mean()))
            r["mean_len"].append(float(pop.lengths().float().mean()))
    return res


if __name__ == "__main__":
    print(json.dumps(main([int(a) for a in sys.argv[1:]] or [6])))
