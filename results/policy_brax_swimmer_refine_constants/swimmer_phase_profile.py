"""Where a Brax Swimmer policy's return goes: the reward is the x velocity of the root joint (the front
segment's frame origin, at the middle of the straight swimmer), so an episode returns the root's x
displacement over 1000 steps divided by the step (0.04 s). For the root and for the three segments' centre of
mass, a line fitted to the mean x over steps 200-1000 gives the stroke's pace (its slope times 1000 steps),
the start (the line at step 0 against the start) and the end (step 1000's x against the line: where in its
stroke the episode stops); displacement = pace + start + end.
``python swimmer_phase_profile.py EPISODES policy.txt...`` prints a JSON line per file (JAX-CPU, generalized
pipeline, fresh starts from PRNGKey(7) as swimmer_gait_profile.py)."""

import json
import sys

import numpy as np
from replay_policy_txt import envs, policy, trace

FIT = 200  # steps: the line is fitted from here on, the start long past


def coordinates(act, episodes: int, env, seed: int) -> np.ndarray:
    """q[:5] (root x, y, heading, the two joints) at every step [episodes, 1001, 5], the start first."""
    q0, q = trace(act, episodes, env, seed, lambda s: s.pipeline_state.q[:5])
    return np.concatenate([q0[:, None], q], 1)


def centre_x(q: np.ndarray, cos=np.cos) -> np.ndarray:
    """x of the three equal capsules' centre of mass (swimmer.xml: the front one 0.5-1.5 ahead of the root,
    the middle one from the joint at 0.5 back by 1, the back one from the joint at its end back by 1);
    ``cos=jnp.cos`` inside JAX."""
    x, a1, a2, a3 = q[..., 0], q[..., 2], q[..., 3], q[..., 4]
    front = x + cos(a1)
    joint2 = x + 0.5 * cos(a1)
    middle = joint2 - 0.5 * cos(a1 + a2)
    back = joint2 - cos(a1 + a2) - 0.5 * cos(a1 + a2 + a3)
    return (front + middle + back) / 3


def split(x: np.ndarray) -> dict:
    t = np.arange(x.shape[1])
    mean = x.mean(0)
    slope, icpt = np.polyfit(t[FIT:], mean[FIT:], 1)
    resid = mean - (slope * t + icpt)
    return {"displacement": round(float((x[:, -1] - x[:, 0]).mean()), 2),
            "pace_x1000": round(1000 * slope, 2),
            "start": round(float(icpt - mean[0]), 2), "end": round(float(resid[-1]), 2),
            "stroke_range": [round(float(resid[FIT:].min()), 2), round(float(resid[FIT:].max()), 2)]}


def profile(path: str, episodes: int, env) -> dict:
    q = coordinates(policy(path), episodes, env, 7)
    dt = float(env.dt)  # positions in return units
    return {"policy": path, "episodes": episodes, "root": split(q[..., 0] / dt),
            "centre_of_mass": split(centre_x(q) / dt)}


if __name__ == "__main__":
    swimmer = envs.get_environment("swimmer", backend="generalized")
    for p in sys.argv[2:]:
        print(json.dumps(profile(p, int(sys.argv[1]), swimmer)), flush=True)
