"""What Brax Swimmer's start from rest costs the evolved formulas against the best start a search finds: an
open-loop term added to each action's tanh argument over the first K steps,

    a_t = tanh(pre(obs_t) + u_t)  (t < K),   a_t = tanh(pre(obs_t))  after,

u (K x 2 numbers) tuned from 0 by the refinement's antithetic random search (``gprl.rl.refine.refine``) on
the whole 1000-step return (each pair's two members play one common fresh start; the best TOP pairs step),
then u and 0 play VALIDATION common fresh starts (the generalized pipeline; on whatever device JAX has).

``python swimmer_start_probe.py POLICY K PAIRS TOP SIGMA STEP SECONDS VALIDATION`` prints a JSON line per
iteration (the perturbations' mean return) and one with the validation: the mean return with u, its paired
difference from u = 0 and that difference's standard error, and u.
``python swimmer_start_probe.py POLICY --first JSONL EPISODES`` plays each u of such a JSONL cut to its first
1, 2 and 4 steps, and whole, on EPISODES common fresh starts: a JSON line each, paired against u = 0."""

import json
import sys
import time

import numpy as np
import torch
from replay_policy_txt import envs, jax, jnp, tanh_arguments

from gprl.rl.refine import RefineSettings, refine

env = envs.get_environment("swimmer", backend="generalized")
pre = tanh_arguments(sys.argv[1])


def episode_return(key, u):
    """The 1000-step return from ``key``'s fresh start with ``u`` [K, 2] added over the first K steps."""
    def body(carry, _):
        s, t = carry
        extra = jnp.where(t < len(u), u[jnp.minimum(t, len(u) - 1)], 0.0)
        s = env.step(s, jnp.tanh(pre(s.obs) + extra).astype(jnp.float32))
        return (s, t + 1), s.reward
    return jax.lax.scan(body, (env.reset(key), 0), None, length=1000)[1].sum()


returns = jax.jit(jax.vmap(episode_return))


def play(starts, u) -> np.ndarray:
    """The returns of one u on every start."""
    us = jnp.broadcast_to(jnp.asarray(u, jnp.float32), (len(starts), *np.shape(u)))
    return np.asarray(returns(starts, us), np.float64)


def summary(tuned: np.ndarray, base: np.ndarray) -> dict:
    return {"without": round(float(base.mean()), 3), "with": round(float(tuned.mean()), 3),
            "gain": round(float((tuned - base).mean()), 3),
            "se": round(float((tuned - base).std() / np.sqrt(len(base))), 3)}


def tune(K, pairs, top, sigma, step, seconds):
    """u tuned by the refinement's own random search (``gprl.rl.refine.refine``); iteration ``it``'s pairs
    play the starts of key ``1000 + it``, each pair's two members the same one."""
    def score(us, it):
        starts = jax.random.split(jax.random.PRNGKey(1000 + it), pairs)
        r = returns(jnp.concatenate([starts, starts]), jnp.asarray(us.numpy()))
        print(json.dumps({"iteration": it + 1, "perturbations_mean": round(float(r.mean()), 3),
                          "s": round(time.time() - t0, 1)}), flush=True)
        return torch.from_numpy(np.asarray(r, np.float64))

    t0 = time.time()
    settings = RefineSettings(pairs=pairs, top=top, sigma=sigma, step=step)
    done = refine(torch.zeros(K, 2), 2 * pairs, settings, seconds, 7, score)
    return done.params.float().numpy(), done.iterations


if sys.argv[2] == "--first":
    episodes = int(sys.argv[4])
    starts = jax.random.split(jax.random.PRNGKey(11), episodes)
    with open(sys.argv[3]) as f:
        tuned = [np.asarray(json.loads(line)["u"], np.float32) for line in f if '"gain"' in line]
    longest = max(len(u) for u in tuned)  # every cut padded with zeros to one shape: one compilation
    base = play(starts, np.zeros((longest, 2), np.float32))
    for u in tuned:
        for n in (1, 2, 4, len(u)):
            cut = np.zeros((longest, 2), np.float32)
            cut[:n] = u[:n]
            line = {"K": len(u), "first": n, "episodes": episodes, **summary(play(starts, cut), base)}
            print(json.dumps(line), flush=True)
else:
    K, PAIRS, TOP = (int(v) for v in sys.argv[2:5])
    SIGMA, STEP, SECONDS = (float(v) for v in sys.argv[5:8])
    VALIDATION = int(sys.argv[8])
    u, iterations = tune(K, PAIRS, TOP, SIGMA, STEP, SECONDS)
    starts = jax.random.split(jax.random.PRNGKey(20261206), VALIDATION)
    print(json.dumps({"policy": sys.argv[1], "K": K, "pairs": PAIRS, "top": TOP, "sigma": SIGMA, "step": STEP,
                      "iterations": iterations, "device": str(jax.devices()[0]), "validation": VALIDATION,
                      **summary(play(starts, u), play(starts, np.zeros_like(u))),
                      "u": [[round(float(v), 3) for v in row] for row in np.asarray(u)]}), flush=True)
