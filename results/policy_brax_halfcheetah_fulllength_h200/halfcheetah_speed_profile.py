"""How fast a Brax HalfCheetah gait gets under way: plays the formulas of policy.txt files (as
``../policy_brax_swimmer_refine_constants/replay_policy_txt.py`` does) on fresh JAX-CPU episodes of the
generalized pipeline and prints each file's mean reward a step over windows of the 1000 steps, and the return
the first 100, 250 and 520 steps give (what short training episodes and racing's horizon see).
``python halfcheetah_speed_profile.py EPISODES policy.txt...`` prints a JSON line per file."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policy_brax_swimmer_refine_constants"))
from replay_policy_txt import envs, policy, rewards  # Brax as it patched it for JAX

NAMES = ["rootz", "rooty", "bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot", "rootx_vel", "rootz_vel",
         "rooty_vel", "bthigh_vel", "bshin_vel", "bfoot_vel", "fthigh_vel", "fshin_vel", "ffoot_vel"]
WINDOWS = [(0, 50), (50, 100), (100, 200), (200, 400), (400, 700), (700, 1000)]
PREFIXES = [100, 250, 520]


def profile(path: str, episodes: int, env) -> dict:
    r = rewards(policy(path, NAMES), episodes, env, 20261202)  # [episodes, 1000]
    return {"policy": path, "episodes": episodes, "return": round(float(r.sum(1).mean()), 1),
            "reward_per_step": {f"{a}-{b}": round(float(r[:, a:b].mean()), 2) for a, b in WINDOWS},
            "return_of_first": {str(n): round(float(r[:, :n].sum(1).mean()), 1) for n in PREFIXES}}


if __name__ == "__main__":
    cheetah = envs.get_environment("halfcheetah", backend="generalized")
    for p in sys.argv[2:]:
        print(json.dumps(profile(p, int(sys.argv[1]), cheetah)), flush=True)
