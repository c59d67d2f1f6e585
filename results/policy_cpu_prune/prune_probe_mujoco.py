"""How many of a refined native-MuJoCo policy's linear terms its return needs, as
``../policy_brax_halfcheetah_default_h200/prune_probe.py`` asks of Brax HalfCheetah: each action of a
``scripts/bench_policies.py`` record's formulas keeps its ``k`` heaviest single-observation terms (|c| times
that observation's standard deviation over the full policy's episodes; constants and other terms stay), and
each ``k`` plays the same fresh native-MuJoCo episodes of the record's task.
``python prune_probe_mujoco.py EPISODES bench.json K...`` prints a JSON line per record and k."""

import json
import sys
from pathlib import Path

import numpy as np
import sympy as sp
import torch

from gprl import envs
from gprl.core.functions import NUMPY_FUNCTIONS, SYMPY_FUNCTIONS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policy_brax_halfcheetah_default_h200"))
from prune_probe import nodes, pruned  # the pruning alone: Brax loads only when it plays

SEED = 20261203


def play(forms: list[sp.Expr], names: list[str], env: envs.VecEnv) -> tuple[np.ndarray, np.ndarray]:
    """Returns [episodes] and every observation the policy saw [steps * episodes, n]."""
    syms = sp.symbols(names)
    fs = [sp.lambdify([syms], e, modules=[NUMPY_FUNCTIONS, "numpy"]) for e in forms]
    seen = []

    def policy(obs: torch.Tensor) -> torch.Tensor:
        x = obs.reshape(-1, len(names)).double().numpy()
        seen.append(x)
        cols = list(x.T)
        act = np.stack([np.broadcast_to(np.asarray(f(cols), np.float64), (len(x),)) for f in fs], 1)
        return torch.from_numpy(np.clip(act, -1, 1)).to(obs.dtype).view(*obs.shape[:-1], len(fs))

    res = envs.rollout(env, policy, 1, env.num_envs, seed=SEED)
    return res.returns[0].double().numpy(), np.concatenate(seen)


def row(record: dict, k: int | None, forms: list[sp.Expr], r: np.ndarray) -> str:
    return json.dumps({"task": record["task"], "seed": record["seed"], "k": k, "nodes": nodes(forms),
                       "episodes": len(r), "return": round(float(r.mean()), 1),
                       "se": round(float(r.std() / np.sqrt(len(r))), 1)})


if __name__ == "__main__":
    episodes, path, ks = int(sys.argv[1]), sys.argv[2], [int(k) for k in sys.argv[3:]]
    with open(path) as f:
        records = json.load(f)["records"]
    for record in records:
        env = envs.make(record["task"], backend="mujoco", num_envs=episodes, device="cpu",
                        episode_length=1000)
        names = env.obs_names
        local = {**SYMPY_FUNCTIONS, **dict(zip(names, sp.symbols(names)))}
        full = [sp.sympify(text, locals=local) for text in record["formulas"].values()]  # in action order
        r, obs = play(full, names, env)
        spread = dict(zip(sp.symbols(names), obs.std(0)))
        print(row(record, None, full, r), flush=True)
        for k in ks:
            forms = [pruned(e, k, spread) for e in full]
            print(row(record, k, forms, play(forms, names, env)[0]), flush=True)
        env.close()
