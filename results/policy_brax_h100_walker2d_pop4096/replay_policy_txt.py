"""Plays Brax policies' readable formulas (policy.txt: 4 significant digits, raw observation units) on fresh
1000-step episodes of the generalized pipeline on JAX's default device, without gprl's evaluator; an episode
that ends (a fall) adds no reward after its last step.
``python replay_policy_txt.py TASK EPISODES SEED policy.txt...`` prints a JSON line per file."""

import json
import sys

import numpy as np
import sympy as sp
from gprl.envs.brax_env import _obs_names, patch_brax_for_jax

from gprl.core import functions as F

patch_brax_for_jax()
import jax  # after the patch
import jax.numpy as jnp
from brax import envs

MODULES = [{"gt": lambda a, b: jnp.where(a > b, 1.0, -1.0), "lt": lambda a, b: jnp.where(a < b, 1.0, -1.0),
            "Min": jnp.minimum, "Max": jnp.maximum}, "jax"]


def policy(path: str, names: list[str]):
    """``act(obs) -> action`` from the formulas of a policy.txt (``a<k> = ...``) over ``names``."""
    syms = sp.symbols(names)
    local = {**dict(zip(names, syms)), "gt": F.gt, "lt": F.lt, "Min": sp.Min, "Max": sp.Max, "tanh": sp.tanh}
    with open(path) as f:
        lines = [line.split(" = ", 1) for line in f.read().splitlines() if line.startswith("a")]
    lines.sort(key=lambda kv: int(kv[0][1:]))  # a10 after a9
    fs = [sp.lambdify([syms], sp.sympify(text, locals=local), modules=MODULES) for _, text in lines]

    def act(obs):
        return jnp.clip(jnp.stack([jnp.asarray(f(list(obs)), jnp.float32) * jnp.ones(()) for f in fs]), -1, 1)

    return act


def returns(act, env, episodes: int, seed: int) -> np.ndarray:
    """The return of each of ``episodes`` fresh 1000-step episodes from ``PRNGKey(seed)``."""
    def rollout(key):
        def body(carry, _):
            state, alive = carry
            state = env.step(state, act(state.obs))
            return (state, alive & (state.done < 0.5)), jnp.where(alive, state.reward, 0.0)
        return jax.lax.scan(body, (env.reset(key), jnp.array(True)), None, length=1000)[1].sum()

    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    return np.asarray(jax.jit(jax.vmap(rollout))(keys), np.float64)


if __name__ == "__main__":
    task, episodes, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    env = envs.get_environment(task, backend="generalized")
    names = _obs_names(task, env, env.observation_size)
    for path in sys.argv[4:]:
        r = returns(policy(path, names), env, episodes, seed)
        print(json.dumps({"policy": path, "episodes": episodes, "mean": round(float(r.mean()), 1),
                          "std": round(float(r.std()), 1), "se": round(float(r.std() / np.sqrt(episodes)), 1),
                          "below_1500": float((r < 1500).mean()), "median": round(float(np.median(r)), 1)}),
              flush=True)
