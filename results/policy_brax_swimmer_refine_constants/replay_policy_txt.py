"""Plays the readable formulas of Brax Swimmer runs (policy.txt: 4 significant digits, raw observation units)
on fresh JAX-CPU Brax episodes of the generalized pipeline, without gprl's evaluator:
``python replay_policy_txt.py EPISODES policy.txt...`` prints a JSON line per file."""

import json
import sys

import numpy as np
import sympy as sp
from gprl.envs.brax_env import patch_brax_for_jax

from gprl.core import functions as F

patch_brax_for_jax()
import jax  # after the patch
import jax.numpy as jnp
from brax import envs

NAMES = ["rot", "rot2", "rot3", "slider1_vel", "slider2_vel", "rot_vel", "rot2_vel", "rot3_vel"]
SYMS = sp.symbols(NAMES)
LOCALS = {**dict(zip(NAMES, SYMS)), "gt": F.gt, "Min": sp.Min, "Max": sp.Max, "tanh": sp.tanh}
MODULES = [{"gt": lambda a, b: jnp.where(a > b, 1.0, -1.0), "Min": jnp.minimum, "Max": jnp.maximum}, "jax"]


def formulas(path: str) -> list[str]:
    """A policy.txt's formulas, one a line (``a<k> = ...``), in the actions' order."""
    with open(path) as f:
        lines = [line.split(" = ", 1) for line in f.read().splitlines() if line.startswith("a")]
    return [text for _, text in sorted(lines, key=lambda kv: int(kv[0][1:]))]  # a10 after a9


def policy(path: str, names: list[str] = NAMES):
    """``act(obs) -> action`` from a policy.txt's formulas, one a line (``a<k> = ...``), in JAX, over the
    observations ``names`` (Swimmer's unless given)."""
    syms = sp.symbols(names)
    local = {**LOCALS, **dict(zip(names, syms))}
    fs = [sp.lambdify([syms], sp.sympify(text, locals=local), modules=MODULES) for text in formulas(path)]

    def act(obs):
        return jnp.clip(jnp.stack([jnp.asarray(f(list(obs)), jnp.float32) * jnp.ones(()) for f in fs]), -1, 1)

    return act


def tanh_arguments(path: str):
    """``pre(obs) -> [n_actions]``: the arguments of a policy.txt's tanh formulas (Swimmer's observations) in
    JAX, for probes that change what goes into the tanh."""
    inner = []
    for text in formulas(path):
        e = sp.sympify(text, locals=LOCALS)
        assert e.func == sp.tanh
        inner.append(sp.lambdify([SYMS], e.args[0], modules=MODULES))
    return lambda obs: jnp.stack([f(list(obs)) for f in inner])


def trace(act, episodes: int, env, seed: int, record=lambda s: s.reward) -> tuple[np.ndarray, np.ndarray]:
    """``record(state)`` of ``act``'s fresh episodes from ``PRNGKey(seed)``: at the start [episodes, ...] and
    after every step [episodes, 1000, ...]."""
    def rollout(key):
        def body(s, _):
            s = env.step(s, act(s.obs))
            return s, record(s)
        s0 = env.reset(key)
        return record(s0), jax.lax.scan(body, s0, None, length=1000)[1]

    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    start, steps = jax.jit(jax.vmap(rollout))(keys)
    return np.asarray(start, np.float64), np.asarray(steps, np.float64)


def rewards(act, episodes: int, env, seed: int) -> np.ndarray:
    """Every step's reward [episodes, 1000] of ``act`` on fresh episodes from ``PRNGKey(seed)``."""
    return trace(act, episodes, env, seed)[1]


def returns(path: str, episodes: int, env) -> np.ndarray:
    return rewards(policy(path), episodes, env, 20261128).sum(1)

if __name__ == "__main__":
    swimmer = envs.get_environment("swimmer", backend="generalized")
    for p in sys.argv[2:]:
        r = returns(p, int(sys.argv[1]), swimmer)
        print(json.dumps({"policy": p, "episodes": len(r), "mean": round(float(r.mean()), 2),
                          "std": round(float(r.std()), 2)}), flush=True)
