"""Where a Brax Swimmer policy's return goes: plays the formulas of policy.txt files (as
``replay_policy_txt.py`` does) on fresh JAX-CPU episodes of the generalized pipeline and splits
it into the stroke's own speed (the mean reward of the last 800 steps' whole strokes, times 1000: what 1000
steps at that speed return) and what the start from rest costs against it.
``python swimmer_gait_profile.py EPISODES policy.txt...`` prints a JSON line per file."""

import json
import sys

import numpy as np
from replay_policy_txt import envs, policy, rewards  # Brax as it patched it for JAX

TAIL = 800  # steps: whole strokes within them, the start from rest long past


def profile(path: str, episodes: int, env) -> dict:
    r = rewards(policy(path), episodes, env, 7)  # [episodes, 1000]
    x = r.mean(0)[-TAIL:] - r.mean(0)[-TAIL:].mean()  # the speed surges once a stroke
    period = 20 + int(np.argmax([x[:-lag] @ x[lag:] for lag in range(20, 80)]))
    stroke = 1000 * float(r[:, -period * (TAIL // period):].mean())  # whole strokes: no phase bias
    ret = float(r.sum(1).mean())
    return {"policy": path, "episodes": episodes, "return": round(ret, 2), "stroke_steps": period,
            "stroke_x1000": round(stroke, 2), "start_cost": round(stroke - ret, 2)}


if __name__ == "__main__":
    swimmer = envs.get_environment("swimmer", backend="generalized")
    for p in sys.argv[2:]:
        print(json.dumps(profile(p, int(sys.argv[1]), swimmer)), flush=True)
