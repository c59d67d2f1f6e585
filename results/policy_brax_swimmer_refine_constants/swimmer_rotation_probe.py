"""Brax Swimmer's evolved formulas played in a frame turned by delta: the policy reads the heading as
rot + delta and the world-frame velocity (slider1_vel, slider2_vel) turned by delta, so (the fluid having no
direction of its own) it swims its own trajectory turned by -delta. The formulas turn slowly left all
episode; turning them right at the start trades the heading's cost against the path. On common fresh JAX-CPU
starts (the generalized pipeline):
``python swimmer_rotation_probe.py EPISODES POLICY 'delta,...'`` prints a JSON line per delta: the mean
return, its paired difference from the first delta and that difference's standard error, and the heading at
the end (the segments' mean angle over the last stroke: mean and spread)."""

import json
import sys
import time

import numpy as np
from replay_policy_txt import envs, jax, jnp, tanh_arguments

env = envs.get_environment("swimmer", backend="generalized")
inner = tanh_arguments(sys.argv[2])


def act(obs, delta):
    c, s = jnp.cos(delta), jnp.sin(delta)
    vx, vy = obs[3], obs[4]
    turned = obs.at[0].add(delta).at[3].set(c * vx - s * vy).at[4].set(s * vx + c * vy)
    return jnp.tanh(jnp.stack([f(list(turned)) for f in inner])).astype(jnp.float32)


def rollout(key, delta):
    def body(s, _):
        s = env.step(s, act(s.obs, delta))
        return s, jnp.stack([s.reward, s.obs[0] + (2 * s.obs[1] + s.obs[2]) / 3])
    return jax.lax.scan(body, env.reset(key), None, length=1000)[1]


episodes, deltas = int(sys.argv[1]), [float(v) for v in sys.argv[3].split(",")]
keys = jax.random.split(jax.random.PRNGKey(5), episodes)
t0 = time.time()
run = jax.jit(jax.vmap(jax.vmap(rollout, in_axes=(0, None)), in_axes=(None, 0)))
trace = np.asarray(run(keys, jnp.asarray(deltas, jnp.float32)), np.float64)  # [deltas, episodes, 1000, 2]
base = trace[0, :, :, 0].sum(1)
for delta, tr in zip(deltas, trace):
    r = tr[:, :, 0].sum(1)
    heading = tr[:, -38:, 1].mean(1)
    print(json.dumps({"delta": delta, "episodes": episodes, "mean": round(float(r.mean()), 3),
                      "vs_first": round(float((r - base).mean()), 3),
                      "se": round(float((r - base).std() / np.sqrt(episodes)), 3),
                      "heading_end": [round(float(heading.mean()), 3), round(float(heading.std()), 3)]}),
          flush=True)
print(json.dumps({"seconds": round(time.time() - t0)}))
