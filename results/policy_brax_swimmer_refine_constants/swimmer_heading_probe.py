"""Brax Swimmer's evolved formulas changed in two ways that take their slow left turn out, on common fresh
JAX-CPU starts (the generalized pipeline):

- ``symmetry lam``: the swimmer's mirror image about its x axis negates the angles, the y velocity and the
  angular velocities; a symmetric policy answers a mirrored state with the negated action. Each action's tanh
  argument loses lam times its even part: ``pre(obs) - lam * (pre(obs) + pre(M obs)) / 2`` (lam = 1: the odd
  part alone, no turn of its own).
- ``rotation delta``: the formulas read the heading as ``rot + delta`` and the world-frame velocity
  (slider1_vel, slider2_vel) turned by delta; the fluid forces act in each body's own frame, so such a policy
  swims its own path turned by -delta (from starts turned by delta).

``python swimmer_heading_probe.py EPISODES POLICY symmetry|rotation 'value,...'`` prints a JSON line per
value: the mean return, its paired difference from the first value and that difference's standard error, and
the heading at the end (the segments' mean angle over the last stroke: mean and spread)."""

import json
import sys
import time

import numpy as np
from replay_policy_txt import envs, jax, jnp, tanh_arguments

# rot, rot2, rot3, slider1_vel, slider2_vel, rot_vel, rot2_vel, rot3_vel
MIRROR = jnp.asarray([-1, -1, -1, 1, -1, -1, -1, -1], jnp.float32)
STROKE = 38  # steps a stroke of these formulas takes

env = envs.get_environment("swimmer", backend="generalized")
pre = tanh_arguments(sys.argv[2])
mode = sys.argv[3]


def act(obs, value):
    if mode == "symmetry":
        p = pre(obs)
        return jnp.tanh(p - value * (p + pre(obs * MIRROR)) / 2).astype(jnp.float32)
    c, s = jnp.cos(value), jnp.sin(value)
    vx, vy = obs[3], obs[4]
    return jnp.tanh(pre(obs.at[0].add(value).at[3].set(c * vx - s * vy).at[4].set(s * vx + c * vy))).astype(
        jnp.float32)


def rollout(key, value):
    def body(s, _):
        s = env.step(s, act(s.obs, value))
        return s, jnp.stack([s.reward, s.obs[0] + (2 * s.obs[1] + s.obs[2]) / 3])
    return jax.lax.scan(body, env.reset(key), None, length=1000)[1]


episodes, values = int(sys.argv[1]), [float(v) for v in sys.argv[4].split(",")]
keys = jax.random.split(jax.random.PRNGKey(5), episodes)
t0 = time.time()
run = jax.jit(jax.vmap(jax.vmap(rollout, in_axes=(0, None)), in_axes=(None, 0)))
trace = np.asarray(run(keys, jnp.asarray(values, jnp.float32)), np.float64)  # [values, episodes, 1000, 2]
base = trace[0, :, :, 0].sum(1)
for value, tr in zip(values, trace):
    r = tr[:, :, 0].sum(1)
    heading = tr[:, -STROKE:, 1].mean(1)
    print(json.dumps({{"symmetry": "lam", "rotation": "delta"}[mode]: value, "episodes": episodes,
                      "mean": round(float(r.mean()), 3), "vs_first": round(float((r - base).mean()), 3),
                      "se": round(float((r - base).std() / np.sqrt(episodes)), 3),
                      "heading_end": [round(float(heading.mean()), 3), round(float(heading.std()), 3)]}),
          flush=True)
print(json.dumps({"seconds": round(time.time() - t0)}))
