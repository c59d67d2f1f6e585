"""Brax Swimmer's heading along the episode, and the evolved formulas with a steering term and re-scaled
observations added, on common fresh JAX-CPU starts (the generalized pipeline):

    a_j = tanh(pre_j(obs') + c_j + k_j * h),   h = rot + (2 rot2 + rot3) / 3   (the segments' mean angle),
    obs' = the angles times (1 + ga), the velocities times (1 + gv).

``python swimmer_steering_probe.py EPISODES POLICY '[[c0, c1, k0, k1, gv, ga], ...]'`` prints a JSON line per
parameter set: the mean return, its paired difference from the first set (every set plays the same starts)
and that difference's standard error; the travel direction (radians) over 50-step windows of the trajectory
averaged over one stroke (38 steps), its mean and spread over the episodes at three points; the path speed of
that averaged trajectory and its x speed (return units a 1,000 steps), and the heading's cost (path length
less x displacement, steps 19-969, in return units)."""

import json
import sys
import time

import numpy as np
from replay_policy_txt import envs, jax, jnp, tanh_arguments

STROKE = 38  # steps a stroke of these formulas takes
WINDOW = 50  # steps between the direction's samples

env = envs.get_environment("swimmer", backend="generalized")
pre = tanh_arguments(sys.argv[2])


def act(obs, p):
    h = obs[0] + (2 * obs[1] + obs[2]) / 3
    obs = jnp.concatenate([obs[:3] * (1 + p[5]), obs[3:] * (1 + p[4])])
    return jnp.tanh(pre(obs) + p[:2] + p[2:4] * h).astype(jnp.float32)


def rollout(key, p):
    def body(s, _):
        s = env.step(s, act(s.obs, p))
        return s, jnp.concatenate([s.pipeline_state.q[:2], s.reward[None]])
    return jax.lax.scan(body, env.reset(key), None, length=1000)[1]


episodes, grid = int(sys.argv[1]), json.loads(sys.argv[3])
keys = jax.random.split(jax.random.PRNGKey(5), episodes)
t0 = time.time()
run = jax.jit(jax.vmap(jax.vmap(rollout, in_axes=(0, None)), in_axes=(None, 0)))
trace = np.asarray(run(keys, jnp.asarray(grid, jnp.float32)), np.float64)  # [sets, episodes, 1000, 3]
box = np.ones(STROKE) / STROKE
base = trace[0, :, :, 2].sum(1)
for p, tr in zip(grid, trace):
    r = tr[:, :, 2].sum(1)
    xs = np.array([np.convolve(v, box, "valid") for v in tr[:, :, 0]])
    ys = np.array([np.convolve(v, box, "valid") for v in tr[:, :, 1]])
    dx, dy = np.diff(xs[:, ::WINDOW], axis=1), np.diff(ys[:, ::WINDOW], axis=1)  # [episodes, windows]
    angle = np.arctan2(dy, dx)
    scale = 1000 / WINDOW / env.dt  # return units a 1,000 steps
    print(json.dumps({
        "p": p, "episodes": episodes, "mean": round(float(r.mean()), 3),
        "vs_first": round(float((r - base).mean()), 3),
        "se": round(float((r - base).std() / np.sqrt(episodes)), 3),
        "direction": {f"step {STROKE // 2 + WINDOW * w}": [round(float(angle[:, w].mean()), 3),
                                                           round(float(angle[:, w].std()), 3)]
                      for w in (0, 8, angle.shape[1] - 1)},
        "path_speed": round(float(np.hypot(dx, dy)[:, 1:].mean() * scale), 2),
        "x_speed": round(float(dx[:, 1:].mean() * scale), 2),
        "heading_cost": round(float((np.hypot(dx, dy) - dx).sum(1).mean() / env.dt), 2)}), flush=True)
print(json.dumps({"seconds": round(time.time() - t0)}))
