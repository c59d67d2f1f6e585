"""Brax Swimmer seed 0's refined formulas with every action's argument scaled, a = tanh(k * pre), on the
same fresh JAX-CPU episodes for each k: ``python action_gain_probe.py EPISODES K...`` prints a JSON line
per k."""

import json
import sys
import time

import jax.numpy as jnp
import numpy as np
from replay_policy_txt import envs, rewards, tanh_arguments

pre = tanh_arguments("policy_500s_swc_a_s0.txt")


def make(k):
    def act(obs):
        return jnp.tanh(k * pre(obs)).astype(jnp.float32)
    return act


env = envs.get_environment("swimmer", backend="generalized")
n = int(sys.argv[1])
for k in [float(x) for x in sys.argv[2:]]:
    t = time.time()
    r = rewards(make(k), n, env, 20261128).sum(1)
    print(json.dumps({"k": k, "episodes": n, "mean": round(float(r.mean()), 2),
                      "se": round(float(r.std() / np.sqrt(n)), 2), "s": round(time.time() - t)}), flush=True)
