"""Runs every evaluation kernel path (every strategy) once on small inputs, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 scripts/sanitize_eval.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_eval.py
"""

import torch

import gprl

ALL = list(gprl.functions.BY_NAME)


def main() -> None:
    dev = "cuda"  # every call names its strategy: no calibration run under the sanitizer
    fit, bat = gprl.strategy.names("fitness"), gprl.strategy.names("forward_batched")
    for n_out, max_len in ((1, 64), (3, 64), (1, 1024)):
        pop = gprl.Population.random(300, 4, n_out, max_len=max_len, functions=ALL, max_depth=6, seed=n_out,
                                     output_prob=0.5, device=dev)
        for D in (1, 37, 700, 5000):  # one pass, partial warps and blocks, several segments per tree
            X, y = torch.rand(D, 4, device=dev), torch.rand(D, n_out, device=dev)
            for s in fit:  # every strategy's plan and shared-memory layout
                pop.forward(X, strategy=s)
                pop.fitness(X, y, metric="mae", strategy=s)
                pop.fitness(X, y, weight=torch.rand(D, device=dev), strategy=s)
        for s in bat:
            pop.forward(torch.rand(300, 5, 4, device=dev), strategy=s)
        pop.validate()
        pop.depths()
    big = gprl.Population.random(3000, 4, max_len=64, functions=ALL, seed=0, device=dev)  # many trees
    big.fitness(torch.rand(200, 4, device=dev), torch.rand(200, device=dev), strategy="warp")
    wide = gprl.Population.random(64, 4, 200, max_len=64, functions=ALL, seed=0, output_prob=0.5, device=dev)
    for s in fit:  # output buffers that had to shrink
        wide.fitness(torch.rand(300, 4, device=dev), torch.rand(300, 200, device=dev), strategy=s)
    torch.cuda.synchronize()
    print("sanitize_eval: all kernel paths ran")


if __name__ == "__main__":
    main()
