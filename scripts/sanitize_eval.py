"""Runs every evaluation kernel path once on small inputs, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 scripts/sanitize_eval.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_eval.py
"""

import torch

import gprl

ALL = list(gprl.functions.BY_NAME)


def main() -> None:
    dev = "cuda"
    for n_out, max_len in ((1, 64), (3, 64), (1, 1024)):
        pop = gprl.Population.random(300, 4, n_out, max_len=max_len, functions=ALL, max_depth=6, seed=n_out,
                                     output_prob=0.5, device=dev)
        for D in (1, 37, 700, 5000):  # warp path, block path with 1/2/4 rows per thread, a partial block
            X, y = torch.rand(D, 4, device=dev), torch.rand(D, n_out, device=dev)
            pop.forward(X)
            for metric in ("mse", "mae", "rmse"):
                pop.fitness(X, y, metric=metric)
            pop.fitness(X, y, weight=torch.rand(D, device=dev))
        pop.forward(torch.rand(300, 5, 4, device=dev))
        pop.validate()
        pop.depths()
    big = gprl.Population.random(3000, 4, max_len=64, functions=ALL, seed=0, device=dev)  # warp path, many trees
    big.fitness(torch.rand(200, 4, device=dev), torch.rand(200, device=dev))
    torch.cuda.synchronize()
    print("sanitize_eval: all kernel paths ran")


if __name__ == "__main__":
    main()
