"""A linear feedback from zero on Brax Swimmer (JAX-CPU, generalized pipeline),
a = tanh(W (obs - mu) / sd + b), tuned by the refinement's own random search (``gprl.rl.refine.refine``: PAIRS
antithetic perturbations of one fresh 1000-step episode each, the best TOP stepping), with mu and sd the
running statistics of every visited observation (Mania et al. 2018, V2-t). Does a linear stroke out-swim the
evolved ones? ``python swimmer_linear_ars_probe.py SEED ITERATIONS`` prints a JSON line per iteration, then
the final feedback on 64 fresh 1000-step episodes."""

import json
import os
import sys
import time

os.environ["JAX_PLATFORMS"] = "cpu"

import torch

from gprl import envs
from gprl.rl.refine import RefineSettings, refine

PAIRS, TOP, SIGMA, STEP, STEPS = 32, 16, 0.03, 0.02, 1000


def main(seed: int, iterations: int) -> None:
    n_obs, n_act = 8, 2
    visited = torch.zeros(3, n_obs, dtype=torch.float64)  # count, sum, sum of squares of the observations
    mu, sd = torch.zeros(n_obs), torch.ones(n_obs)

    def play(params: torch.Tensor, episode_seed: int) -> torch.Tensor:
        """Each feedback's 1000-step return on one fresh start each; updates the running statistics."""
        nonlocal mu, sd
        env = envs.make("swimmer", backend="brax", num_envs=len(params), device="cpu", episode_length=STEPS,
                        pipeline="generalized")
        obs = env.reset(episode_seed)
        ret = torch.zeros(len(params), dtype=torch.float64)
        for _ in range(STEPS):
            visited.add_(torch.stack([torch.ones_like(obs), obs, obs ** 2]).double().sum(1))
            a = torch.tanh(torch.einsum("nao,no->na", params[..., :-1], (obs - mu) / sd) + params[..., -1])
            obs, r, _, _ = env.step(a)
            ret += r.double()
        env.close()
        mean = visited[1] / visited[0]
        mu, sd = mean.float(), (visited[2] / visited[0] - mean ** 2).clamp_min(1e-8).sqrt().float()
        return ret

    clock = time.perf_counter()

    def iteration(params: torch.Tensor, it: int) -> torch.Tensor:
        nonlocal clock
        ret = play(params, 1000 * seed + it)
        line = {"iteration": it, "s": round(time.perf_counter() - clock, 1),
                "mean": round(float(ret.mean()), 2), "best": round(float(ret.max()), 2)}
        print(json.dumps(line), flush=True)
        clock = time.perf_counter()
        return ret

    settings = RefineSettings(iterations=iterations, pairs=PAIRS, top=TOP, sigma=SIGMA, step=STEP)
    theta = refine(torch.zeros(n_act, n_obs + 1), 2 * PAIRS, settings, None, seed, iteration).params.float()
    ret = play(theta.expand(64, *theta.shape), 999_999)
    found = {"theta": theta, "mu": mu, "sd": sd}
    rounded = {k: v.double().round(decimals=4).tolist() for k, v in found.items()}
    print(json.dumps({"final_64_fresh_mean": round(float(ret.mean()), 2),
                      "sem": round(float(ret.std() / 8), 2), **rounded}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0, int(sys.argv[2]) if len(sys.argv) > 2 else 100)
