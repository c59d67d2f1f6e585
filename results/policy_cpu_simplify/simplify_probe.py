"""What ``task.simplify`` does to exported native-MuJoCo policies of the defaults: each record's formulas
(``scripts/bench_policies.py`` records; raw observation units, so the tree sees mean 0 and std 1) are
simplified by evaluation as ``PolicyTask._simplified`` does (``gprl.evolve.simplify`` at each of
``SIMPLIFY_TOLERANCES`` on 2,048 observations of 16 episodes of the tree's own), the tree and the simplified
ones are validated on the task's default number of fresh episodes, the shortest within the share (default
0.02) of the best validated is picked, and the tree and the pick play 10 (``FINAL``) further fresh episodes.
``python simplify_probe.py TASK:FILE:SEED[:EPISODES[:SHARE]] ...`` prints a JSON line per record;
``BACKEND=brax`` plays Brax records on Brax's generalized pipeline (JAX-CPU here)."""

import json
import os
import sys

import numpy as np
import sympy as sp
import torch

from gprl import envs
from gprl.core.functions import SYMPY_FUNCTIONS
from gprl.core.population import Population
from gprl.evolve.simplify import simplify
from gprl.rl.export import policy_expressions, readable
from gprl.rl.policy import ActionMap, evaluate_policies
from gprl.train.tasks.policy import SIMPLIFY_EPISODES, SIMPLIFY_ROWS, SIMPLIFY_TOLERANCES

VISIT, VALIDATE, EVALUATE = 101, 202, 10_000_019  # three sets of fresh starts
FINAL = int(os.environ.get("FINAL", "10"))  # episodes of the tree and the pick at the end
BACKEND = os.environ.get("BACKEND", "mujoco")
KWARGS = {"pipeline": "generalized"} if BACKEND == "brax" else {}  # the pipeline of the Brax defaults


def inner(e: sp.Expr) -> sp.Expr:
    """u of an action printed as tanh(u), -tanh(v) (= tanh(-v)) or a number c (= tanh(atanh(c)))."""
    if e.is_Number:
        return sp.Float(np.arctanh(float(e)))
    if e.func == sp.tanh:
        return e.args[0]
    if (-e).func == sp.tanh:
        return -(-e).args[0]
    raise ValueError(f"not a tanh action: {e}")


def play(trees: Population, task: str, episodes: int, seed: int, record: bool = False):
    """Each tree's episode returns [K, episodes] (and, with record, the first tree's live observations)."""
    env = envs.make(task, backend=BACKEND, num_envs=len(trees) * episodes, device="cpu", episode_length=1000,
                    **KWARGS)
    amap = ActionMap.for_env(env)
    n = env.obs_dim
    if record:
        seen = []

        def policy(obs):
            seen.append(obs.reshape(-1, n)[:episodes][~env.done[:episodes]])
            return amap(trees.forward(obs.reshape(-1, n), check_finite=False).reshape(*obs.shape[:-1], -1))

        envs.rollout(env, policy, 1, episodes, seed=seed)
        env.close()
        return torch.cat(seen)
    ev = evaluate_policies(trees, env, amap, torch.zeros(n), torch.ones(n), episodes, 1000, seed=seed)
    env.close()
    return ev.episode_returns.numpy()


def nodes(tree: Population, names: list[str]) -> list[int]:
    n, k = len(names), tree.n_out
    exprs = policy_expressions(tree, [0.0] * n, [1.0] * n, "tanh", [-1.0] * k, [1.0] * k, names)
    return [sum(1 for _ in sp.preorder_traversal(readable(e))) for e in exprs]


def probe(task: str, path: str, seed: int, validation: int, share: float) -> dict:
    with open(path) as f:
        record = next(r for r in json.load(f)["records"] if r["task"] == task and r["seed"] == seed)
    env = envs.make(task, backend=BACKEND, num_envs=1, device="cpu", **KWARGS)
    names, amap = env.obs_names, ActionMap.for_env(env)
    env.close()
    local = {**SYMPY_FUNCTIONS, **dict(zip(names, sp.symbols(names)))}
    actions = [str(inner(sp.sympify(text, locals=local))) for text in record["formulas"].values()]
    tree = Population.from_expressions([actions], names=names, n_in=len(names))
    X = play(tree, task, SIMPLIFY_EPISODES, VISIT, record=True)
    X = X[torch.randperm(len(X), generator=torch.Generator().manual_seed(0))[:SIMPLIFY_ROWS]]
    reference = amap.unit(tree.forward(X))[0]
    found, simpler = [], tree
    for tol in SIMPLIFY_TOLERANCES:
        simpler = simplify(simpler, X, tol, amap.unit, reference, 30.0)
        if simpler.lengths().item() < (found[-1][1] if found else tree).lengths().item():
            found.append((tol, simpler))
    trees = Population.cat([tree] + [t for _, t in found])
    valid = play(trees, task, validation, VALIDATE).mean(1)
    lengths = trees.lengths().tolist()
    near = [k for k in range(len(trees)) if valid[k] >= valid.max() - share * abs(valid.max())]
    pick = min(near, key=lambda k: (lengths[k], -valid[k]))
    final = play(trees[[0, pick]], task, FINAL, EVALUATE)
    return {"task": task, "seed": seed, "source": path, "recorded_eval": round(record["eval"]["mean"], 1),
            "tolerances": [tol for tol, _ in found], "lengths": lengths,
            "validation": [round(float(v), 1) for v in valid], "validation_episodes": validation,
            "share": share, "picked": pick, "picked_tolerance": found[pick - 1][0] if pick else None,
            "nodes_before": nodes(tree, names), "nodes_after": nodes(trees[pick], names),
            "return_before": round(float(final[0].mean()), 1), "std_before": round(float(final[0].std()), 1),
            "return_after": round(float(final[1].mean()), 1), "std_after": round(float(final[1].std()), 1)}


if __name__ == "__main__":
    torch.set_num_threads(1)
    for arg in sys.argv[1:]:
        task, path, seed, *v = arg.split(":")
        episodes, share = int(v[0]) if v else 10, float(v[1]) if len(v) > 1 else 0.02
        print(json.dumps(probe(task, path, int(seed), episodes, share)), flush=True)
