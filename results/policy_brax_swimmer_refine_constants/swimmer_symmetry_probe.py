"""Brax Swimmer's evolved formulas made mirror-symmetric in part, on common fresh JAX-CPU starts (the
generalized pipeline). The swimmer's mirror image about its x axis negates the angles, the y velocity and the
angular velocities; a symmetric policy answers a mirrored state with the negated action:

    a_j = tanh(pre_j(obs) - lam * (pre_j(obs) + pre_j(M obs)) / 2),

lam = 0 the formulas as evolved, lam = 1 their odd part alone (no turn of its own).
``python swimmer_symmetry_probe.py EPISODES POLICY 'lam,...'`` prints a JSON line per lam: the mean return,
its paired difference from the first lam and that difference's standard error, and the heading at the end
(the segments' mean angle over the last stroke: mean and spread)."""

import json
import sys
import time

import numpy as np
from replay_policy_txt import envs, jax, jnp, tanh_arguments

# rot, rot2, rot3, slider1_vel, slider2_vel, rot_vel, rot2_vel, rot3_vel
MIRROR = jnp.asarray([-1, -1, -1, 1, -1, -1, -1, -1], jnp.float32)

env = envs.get_environment("swimmer", backend="generalized")
inner = tanh_arguments(sys.argv[2])


def act(obs, lam):
    pre = jnp.stack([f(list(obs)) for f in inner])
    mirrored = jnp.stack([f(list(obs * MIRROR)) for f in inner])
    return jnp.tanh(pre - lam * (pre + mirrored) / 2).astype(jnp.float32)


def rollout(key, lam):
    def body(s, _):
        s = env.step(s, act(s.obs, lam))
        return s, jnp.stack([s.reward, s.obs[0] + (2 * s.obs[1] + s.obs[2]) / 3])
    return jax.lax.scan(body, env.reset(key), None, length=1000)[1]


episodes, lams = int(sys.argv[1]), [float(v) for v in sys.argv[3].split(",")]
keys = jax.random.split(jax.random.PRNGKey(5), episodes)
t0 = time.time()
run = jax.jit(jax.vmap(jax.vmap(rollout, in_axes=(0, None)), in_axes=(None, 0)))
trace = np.asarray(run(keys, jnp.asarray(lams, jnp.float32)), np.float64)  # [lams, episodes, 1000, 2]
base = trace[0, :, :, 0].sum(1)
for lam, tr in zip(lams, trace):
    r = tr[:, :, 0].sum(1)
    heading = tr[:, -38:, 1].mean(1)  # the mean angle over the last stroke
    print(json.dumps({"lam": lam, "episodes": episodes, "mean": round(float(r.mean()), 3),
                      "vs_first": round(float((r - base).mean()), 3),
                      "se": round(float((r - base).std() / np.sqrt(episodes)), 3),
                      "heading_end": [round(float(heading.mean()), 3), round(float(heading.std()), 3)]}),
          flush=True)
print(json.dumps({"seconds": round(time.time() - t0)}))
