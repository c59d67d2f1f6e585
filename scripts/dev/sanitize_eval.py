"""Runs every evaluation kernel path (every strategy) once on small inputs, for compute-sanitizer:

    compute-sanitizer --tool memcheck python3 scripts/dev/sanitize_eval.py
    compute-sanitizer --tool racecheck python3 scripts/dev/sanitize_eval.py level   # named ones only

Named strategies leave out the automatic choice and the policy path, which keeps a racecheck run short
(18-21 s a strategy on an H100; with those paths, three strategies did not finish within 400 s).
"""

import sys

import torch

import gprl

ALL = list(gprl.functions.BY_NAME)


def main() -> None:
    # besides the automatic path, every call names its strategy: no calibration under the sanitizer
    dev = "cuda"
    only = set(sys.argv[1:]) or set(gprl.strategy.IDS)
    auto = not sys.argv[1:]
    fit = [s for s in gprl.strategy.names("fitness") if s in only]
    fwd = [s for s in gprl.strategy.names("forward") if s in only]
    for n_out, max_len in ((1, 64), (3, 64), (1, 1024)):
        pop = gprl.Population.random(300, 4, n_out, max_len=max_len, functions=ALL, max_depth=6, seed=n_out,
                                     output_prob=0.5, device=dev)
        for D in (1, 37, 700, 5000):  # warp path, block path with 1/2/4 rows per thread, a partial block
            X, y = torch.rand(D, 4, device=dev), torch.rand(D, n_out, device=dev)
            if auto:
                pop.forward(X, strategy="auto")
                for metric in ("mse", "mae", "rmse"):
                    pop.fitness(X, y, metric=metric, strategy="auto")
                pop.fitness(X, y, weight=torch.rand(D, device=dev), strategy="auto")
            for s in fwd:
                pop.forward(X, strategy=s)
            for s in fit:
                if s == "warp" and n_out > 1:
                    continue  # single-output only (an error, tested in tests/backend/test_gpu.py)
                pop.fitness(X, y, metric="mae", strategy=s)
                pop.fitness(X, y, weight=torch.rand(D, device=dev), strategy=s)
        if auto:
            pop.forward(torch.rand(300, 5, 4, device=dev))  # the policy path: [P, E, n_in] inputs
        pop.validate()
        pop.depths()
    # warp path, many trees
    big = gprl.Population.random(5000, 4, max_len=64, functions=ALL, seed=0, device=dev)
    if auto:
        big.fitness(torch.rand(200, 4, device=dev), torch.rand(200, device=dev), strategy="auto")
    if "warp" in fit:
        big.fitness(torch.rand(200, 4, device=dev), torch.rand(200, device=dev), strategy="warp")
        # not staged
        big.fitness(torch.rand(5000, 4, device=dev), torch.rand(5000, device=dev), strategy="warp")
    if "hybrid_r4" in fit:  # trees taken longest first, the sort over two chunks of its threads
        big.fitness(torch.rand(392, 4, device=dev), torch.rand(392, device=dev), strategy="hybrid_r4")
    for n_out in (100, 200):  # per-thread output buffers in shared memory near their 96 KiB bound
        wide = gprl.Population.random(64, 4, n_out, max_len=64, functions=ALL, seed=0, output_prob=0.5,
                                      device=dev)
        X, y = torch.rand(300, 4, device=dev), torch.rand(300, n_out, device=dev)
        if auto:
            wide.fitness(X, y, strategy="auto")  # 200: falls back to 32 threads of 1 row
        for s in (s for s in fit if s != "warp"):
            if gprl.strategy.unavailable("fitness", s, 300, n_out) is None:  # 100: hybrid_r1 and level
                wide.fitness(X, y, strategy=s)
    torch.cuda.synchronize()
    print("sanitize_eval: all kernel paths ran")


if __name__ == "__main__":
    main()
