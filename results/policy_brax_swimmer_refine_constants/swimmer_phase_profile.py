"""Where a Brax Swimmer policy's return goes, by the front body's position: the return is the front body's
x displacement over the episode divided by the step (0.04 s), so it splits into the stroke's pace (a line
fitted to the mean x over steps 200-1000, times 1000 steps), the start (the line at step 0 against the start)
and the end (step 1000's x against the line: where in its stroke the episode stops).
``python swimmer_phase_profile.py EPISODES policy.txt...`` prints a JSON line per file (JAX-CPU, generalized
pipeline, fresh starts from PRNGKey(7) as swimmer_gait_profile.py)."""

import json
import sys

import numpy as np
from replay_policy_txt import envs, jax, policy

FIT = 200  # steps: the line is fitted from here on, the start long past


def positions(act, episodes: int, env, seed: int) -> np.ndarray:
    """The front body's x at every step [episodes, 1001] (the start first) on fresh episodes."""
    def rollout(key):
        s0 = env.reset(key)

        def body(s, _):
            s = env.step(s, act(s.obs))
            return s, s.pipeline_state.q[0]
        return s0.pipeline_state.q[0], jax.lax.scan(body, s0, None, length=1000)[1]

    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    x0, x = jax.jit(jax.vmap(rollout))(keys)
    return np.concatenate([np.asarray(x0, np.float64)[:, None], np.asarray(x, np.float64)], 1)


def profile(path: str, episodes: int, env) -> dict:
    x = positions(policy(path), episodes, env, 7) / float(env.dt)  # in return units
    t = np.arange(x.shape[1])
    mean = x.mean(0)
    slope, icpt = np.polyfit(t[FIT:], mean[FIT:], 1)
    resid = mean - (slope * t + icpt)
    ret = x[:, -1] - x[:, 0]  # the return before the control cost (about 0.19)
    return {"policy": path, "episodes": episodes, "x_return": round(float(ret.mean()), 2),
            "pace_x1000": round(1000 * slope, 2), "start": round(float(mean[0] - icpt), 2),
            "end": round(float(resid[-1]), 2), "stroke_range": [round(float(resid[FIT:].min()), 2),
                                                               round(float(resid[FIT:].max()), 2)]}


if __name__ == "__main__":
    swimmer = envs.get_environment("swimmer", backend="generalized")
    for p in sys.argv[2:]:
        print(json.dumps(profile(p, int(sys.argv[1]), swimmer)), flush=True)
