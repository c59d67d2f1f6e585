"""Open-loop periodic strokes on Brax Swimmer (JAX-CPU, generalized pipeline):
a_j(t) = clip(A_j sin(2 pi t / T + phi_j) + b_j, -1, 1) for both joints (phi_0 = 0). Each round plays 512
strokes on one fresh start each for 400 steps, scores them by the mean reward a step over steps 200-400
(x 1000), keeps the best 16 and resamples around them; then the final 8 play 64 fresh 1000-step episodes each.
``python swimmer_open_loop_probe.py SEED`` prints a JSON line per round and one for the final 8."""

import json
import math
import os
import sys
import time

os.environ["JAX_PLATFORMS"] = "cpu"

import numpy as np
import torch

from gprl import envs

N, STEPS, LO = 512, 400, 200


def run(params: np.ndarray, steps: int, seed: int) -> np.ndarray:
    """Each stroke's reward at every step, [strokes, steps], one fresh start each."""
    n = len(params)
    env = envs.make("swimmer", backend="brax", num_envs=n, device="cpu", episode_length=1000,
                    pipeline="generalized")
    env.reset(seed)
    P = torch.tensor(params, dtype=torch.float32)
    A, T, ph, b = P[:, 0:2], P[:, 2:3], P[:, 3:5], P[:, 5:7]
    rews = []
    for t in range(steps):
        a = (A * torch.sin(2 * math.pi * t / T + ph) + b).clamp(-1, 1)
        _, r, _, _ = env.step(a)
        rews.append(r.clone())
    env.close()
    return torch.stack(rews, 1).numpy()


def sample(rng: np.random.Generator, center: np.ndarray | None = None, scale: np.ndarray | None = None):
    """N strokes: uniform at first, then Gaussian around ``center``'s rows."""
    if center is None:
        return np.stack([rng.uniform(0.3, 4, N), rng.uniform(0.3, 4, N), rng.uniform(15, 70, N),
                         np.zeros(N), rng.uniform(0, 2 * np.pi, N), rng.uniform(-0.3, 0.3, N),
                         rng.uniform(-0.3, 0.3, N)], 1)
    p = center[rng.integers(0, len(center), N)] + rng.normal(0, 1, (N, 7)) * scale
    p[:, 0:2] = np.abs(p[:, 0:2])
    p[:, 2] = np.clip(p[:, 2], 8, 120)
    p[:, 3] = 0
    return p


def main(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = sample(rng)
    for rnd in range(14):
        t = time.time()
        R = run(p, STEPS, 100 + rnd)
        speed = R[:, LO:].mean(1) * 1000
        order = np.argsort(-speed)
        best = p[order[:16]]
        print(json.dumps({"round": rnd, "s": round(time.time() - t),
                          "top_speed_per_1000": [round(float(x), 1) for x in speed[order[:8]]],
                          "top_params": [[round(float(v), 3) for v in q] for q in best[:4]]}), flush=True)
        p = sample(rng, best, np.array([0.15, 0.15, 1.5, 0, 0.15, 0.03, 0.03]) * (0.8 ** rnd))
        p[:16] = best
    R = run(np.repeat(best[:8], 64, 0), 1000, 7)  # the final 8 on 64 full episodes each
    ret = R.sum(1).reshape(8, 64)
    steady = (R[:, 300:].mean(1) * 1000).reshape(8, 64).mean(1)
    print(json.dumps({"final_returns_mean": [round(float(x), 1) for x in ret.mean(1)],
                      "sem": [round(float(x), 2) for x in ret.std(1) / 8],
                      "steady_300_1000": [round(float(x), 1) for x in steady],
                      "params": [[round(float(v), 3) for v in q] for q in best[:8]]}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
