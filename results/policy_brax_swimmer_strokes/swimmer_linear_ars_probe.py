"""A linear feedback from zero on Brax Swimmer (JAX-CPU, generalized pipeline), by augmented random search
(Mania et al. 2018, V2-t): a = tanh(W (obs - mu) / sd + b), mu and sd the running statistics of every visited
observation. Each iteration plays PAIRS antithetic perturbations (sigma SIGMA) of one fresh 1000-step episode
each, the best TOP pairs step by STEP over the return spread. Does a linear stroke out-swim the evolved ones?
``python swimmer_linear_ars_probe.py SEED ITERATIONS`` prints a JSON line per iteration, then the final policy
on 64 fresh 1000-step episodes."""

import json
import os
import sys
import time

os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np
import torch

from gprl import envs

PAIRS, TOP, SIGMA, STEP, STEPS = 32, 16, 0.03, 0.02, 1000


def play(thetas: np.ndarray, mu: np.ndarray, sd: np.ndarray, seed: int):
    """Each policy's 1000-step return on one fresh start each, and the visited observations' sums."""
    n = len(thetas)
    env = envs.make("swimmer", backend="brax", num_envs=n, device="cpu", episode_length=STEPS,
                    pipeline="generalized")
    obs = env.reset(seed)
    th = torch.tensor(thetas, dtype=torch.float32)
    W, b = th[:, :, :-1], th[:, :, -1]
    m, s = torch.tensor(mu, dtype=torch.float32), torch.tensor(sd, dtype=torch.float32)
    ret = torch.zeros(n, dtype=torch.float64)
    o_sum = torch.zeros(obs.shape[1], dtype=torch.float64)
    o_sq = torch.zeros_like(o_sum)
    for _ in range(STEPS):
        o_sum += obs.double().sum(0)
        o_sq += (obs.double() ** 2).sum(0)
        a = torch.tanh(torch.einsum("nao,no->na", W, (obs - m) / s) + b)
        obs, r, _, _ = env.step(a)
        ret += r.double()
    env.close()
    return ret.numpy(), o_sum.numpy(), o_sq.numpy(), n * STEPS


def main(seed: int, iterations: int) -> None:
    rng = np.random.default_rng(seed)
    dim_obs, dim_act = 8, 2
    theta = np.zeros((dim_act, dim_obs + 1))
    mu, sd = np.zeros(dim_obs), np.ones(dim_obs)
    tot, tot_sq, count = np.zeros(dim_obs), np.zeros(dim_obs), 0
    for it in range(iterations):
        t = time.time()
        eps = rng.normal(0, 1, (PAIRS,) + theta.shape)
        thetas = np.concatenate([theta + SIGMA * eps, theta - SIGMA * eps])
        ret, s1, s2, c = play(thetas, mu, sd, 1000 * seed + it)
        tot, tot_sq, count = tot + s1, tot_sq + s2, count + c
        mu = tot / count
        sd = np.sqrt(np.maximum(tot_sq / count - mu ** 2, 1e-8))
        plus, minus = ret[:PAIRS], ret[PAIRS:]
        best = np.argsort(-np.maximum(plus, minus))[:TOP]
        spread = np.concatenate([plus[best], minus[best]]).std() + 1e-8
        theta = theta + STEP / (TOP * spread) * np.einsum("k,kij->ij", plus[best] - minus[best], eps[best])
        line = {"iteration": it, "s": round(time.time() - t, 1), "mean": round(float(ret.mean()), 2),
                "best": round(float(ret.max()), 2)}
        print(json.dumps(line), flush=True)
    ret, *_ = play(np.repeat(theta[None], 64, 0), mu, sd, 999_999)
    print(json.dumps({"final_64_fresh_mean": round(float(ret.mean()), 2),
                      "sem": round(float(ret.std() / 8), 2), "theta": theta.round(4).tolist(),
                      "mu": mu.round(4).tolist(), "sd": sd.round(4).tolist()}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0, int(sys.argv[2]) if len(sys.argv) > 2 else 100)
