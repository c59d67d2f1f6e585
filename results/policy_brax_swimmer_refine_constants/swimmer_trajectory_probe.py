"""How far a time-varying control gets from Brax Swimmer's evolved formulas: a residual u_t added to each
action's tanh argument at every step of the episode,

    a_t = tanh(pre(obs_t) + u_t)  (t < 1000),

u (1000 x 2 numbers per start) tuned from 0 by gradient ascent (Adam) through Brax's differentiable
generalized pipeline, each start on its own. The objective is the 1000-step return (``return``: the root's
x displacement over the step) or the three segments' centre of mass's x displacement in the same units
(``centre``: the swimmer's progress, which the front segment's swing about it cannot move).
A formula sees no clock: what u gains that a reactive policy could not take tells where the return's
headroom lies.

``python swimmer_trajectory_probe.py POLICY OBJECTIVE STARTS ITERATIONS LR [FREE]`` (u acts in the first FREE
steps alone, default 1000: the formulas play the rest on their own) prints a JSON line every 10
iterations, then one per start with u = 0 and the best u found (the objective is not smooth: the formulas'
``gt`` switches): return, its first 200 and last 38 steps, and the root's and the centre's displacement
split into pace, start and end (``swimmer_phase_profile.py``)."""

import json
import sys
import time

import numpy as np
from replay_policy_txt import envs, jax, jnp, tanh_arguments
from swimmer_phase_profile import centre_x, split

env = envs.get_environment("swimmer", backend="generalized")
pre = tanh_arguments(sys.argv[1])
OBJECTIVE = sys.argv[2]
STARTS, ITERATIONS = int(sys.argv[3]), int(sys.argv[4])
LR = float(sys.argv[5])
FREE = int(sys.argv[6]) if len(sys.argv) > 6 else 1000
ACTS = (jnp.arange(1000) < FREE)[:, None]  # the steps u acts in
DT = float(env.dt)  # positions over the step: return units


def episode(u, key):
    """The objective, and per step the reward and q[:5] (the start first)."""
    def body(s, ut):
        s = env.step(s, jnp.tanh(pre(s.obs) + ut).astype(jnp.float32))
        return s, (s.reward, s.pipeline_state.q[:5])
    s0 = env.reset(key)
    r, q = jax.lax.scan(body, s0, u * ACTS)[1]
    q = jnp.concatenate([s0.pipeline_state.q[None, :5], q])
    progress = r.sum() if OBJECTIVE == "return" else (centre_x(q[-1], jnp.cos) - centre_x(q[0], jnp.cos)) / DT
    return progress, (r, q)


keys = jax.random.split(jax.random.PRNGKey(5), STARTS)
ascent = jax.jit(jax.vmap(jax.value_and_grad(episode, has_aux=True)))
u = jnp.zeros((STARTS, 1000, 2))
m, v = jnp.zeros_like(u), jnp.zeros_like(u)
best, best_u = np.full(STARTS, -np.inf), np.zeros(u.shape, np.float32)
t0 = time.time()
for it in range(ITERATIONS):
    (value, (r, _)), grad = ascent(u, keys)
    value = np.asarray(value, np.float64)
    better = value > best
    best, best_u[better] = np.where(better, value, best), np.asarray(u)[better]
    if it % 10 == 0 or it == ITERATIONS - 1:
        returns = np.asarray(r, np.float64).sum(1)
        print(json.dumps({"iteration": it, "objective": np.round(value, 2).tolist(),
                          "return": np.round(returns, 2).tolist(), "s": round(time.time() - t0)}), flush=True)
    m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad ** 2
    u = u + LR * (m / (1 - 0.9 ** (it + 1))) / (jnp.sqrt(v / (1 - 0.999 ** (it + 1))) + 1e-8)

for name, tuned in (("u = 0", np.zeros_like(best_u)), ("best u", best_u)):
    _, (r, q) = ascent(jnp.asarray(tuned), keys)[0]
    r, q = np.asarray(r, np.float64), np.asarray(q, np.float64)
    for i in range(STARTS):
        print(json.dumps({"policy": sys.argv[1], "objective": OBJECTIVE, "iterations": ITERATIONS, "lr": LR,
                          **({"free": FREE} if FREE < 1000 else {}),
                          "start": i, "u": name, "return": round(float(r[i].sum()), 2),
                          "first_200": round(float(r[i, :200].sum()), 2),
                          "last_38": round(float(r[i, -38:].sum()), 2),
                          "root": split(q[i:i + 1, :, 0] / DT), "centre": split(centre_x(q[i:i + 1]) / DT),
                          "u_mean_abs": round(float(np.abs(tuned[i]).mean()), 3)}), flush=True)
