"""Open-loop periodic strokes on Brax Swimmer (JAX-CPU): a_j(t) = clip(A_j sin(2 pi t / T + phi_j) + b_j, -1, 1);
mean reward a step over steps [lo, hi) (steady state) and the whole return of `hi` steps."""
import os, sys, json, math, time
os.environ["JAX_PLATFORMS"] = "cpu"
import numpy as np, torch
from gprl import envs

def run(params, steps, seed):
    n = len(params)
    env = envs.make("swimmer", backend="brax", num_envs=n, device="cpu", episode_length=1000, pipeline="generalized")
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

rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
n, steps, lo = 512, 400, 200
def sample(center=None, scale=None):
    if center is None:
        p = np.stack([rng.uniform(0.3, 4, n), rng.uniform(0.3, 4, n), rng.uniform(15, 70, n),
                      np.zeros(n), rng.uniform(0, 2 * np.pi, n), rng.uniform(-0.3, 0.3, n), rng.uniform(-0.3, 0.3, n)], 1)
    else:
        p = center[rng.integers(0, len(center), n)] + rng.normal(0, 1, (n, 7)) * scale
        p[:, 0:2] = np.abs(p[:, 0:2]); p[:, 2] = np.clip(p[:, 2], 8, 120); p[:, 3] = 0
    return p
p = sample()
for rnd in range(14):
    t = time.time()
    R = run(p, steps, 100 + rnd)
    speed = R[:, lo:].mean(1) * 1000
    order = np.argsort(-speed)
    best = p[order[:16]]
    print(json.dumps({"round": rnd, "s": round(time.time() - t), "top_speed_per_1000": [round(float(x), 1) for x in speed[order[:8]]],
                      "top_params": [[round(float(v), 3) for v in q] for q in best[:4]]}), flush=True)
    p = sample(best, np.array([0.15, 0.15, 1.5, 0, 0.15, 0.03, 0.03]) * (0.8 ** rnd))
    p[:16] = best

# the top 8 on 64 full 1000-step episodes each from fresh starts
top = np.repeat(best[:8], 64, 0)
R = run(top, 1000, 7)
ret = R.sum(1).reshape(8, 64)
print(json.dumps({"final_returns_mean": [round(float(x), 1) for x in ret.mean(1)], "sem": [round(float(x), 2) for x in ret.std(1) / 8],
                  "steady_300_1000": [round(float(x), 1) for x in (R[:, 300:].mean(1) * 1000).reshape(8, 64).mean(1)],
                  "params": [[round(float(v), 3) for v in q] for q in best[:8]]}), flush=True)
