"""How many of a refined Brax HalfCheetah policy's linear terms its return needs: each action of policy.txt
is tanh(sum of terms); a term c * obs_i weighs |c| times obs_i's standard deviation on the full policy's
episodes, and each action keeps its ``k`` heaviest such terms (every other term, constants and products,
stays). Each ``k`` plays the same fresh JAX-CPU episodes of the generalized pipeline (as
``../policy_brax_swimmer_refine_constants/replay_policy_txt.py`` does).
``python prune_probe.py EPISODES policy.txt K...`` prints a JSON line per k: the sympy nodes per action and
the return."""

import json
import sys
from pathlib import Path

import numpy as np
import sympy as sp
from gprl.envs.mujoco_tasks import TASKS

from gprl.core.functions import SYMPY_FUNCTIONS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policy_brax_swimmer_refine_constants"))

NAMES = TASKS["halfcheetah"].default_obs_names()  # Brax's layout and names are MuJoCo's
SYMS = sp.symbols(NAMES)
SEED = 20261203


def formulas(path: str) -> list[sp.Expr]:
    with open(path) as f:
        lines = sorted((line.split(" = ", 1) for line in f.read().splitlines() if line.startswith("a")),
                       key=lambda kv: int(kv[0][1:]))
    return [sp.sympify(text, locals={**SYMPY_FUNCTIONS, **dict(zip(NAMES, SYMS))}) for _, text in lines]


def play(forms: list[sp.Expr], episodes: int, env) -> tuple[np.ndarray, np.ndarray]:
    """Returns [episodes] and every observation [episodes, 1000, n] of the formulas on fresh episodes."""
    from replay_policy_txt import MODULES, jax, jnp  # Brax as it patched it for JAX
    fs = [sp.lambdify([SYMS], e, modules=MODULES) for e in forms]

    def act(obs):
        return jnp.clip(jnp.stack([jnp.asarray(f(list(obs)), jnp.float32) * jnp.ones(()) for f in fs]), -1, 1)

    def rollout(key):
        def body(s, _):
            obs = s.obs
            s = env.step(s, act(obs))
            return s, (s.reward, obs)
        return jax.lax.scan(body, env.reset(key), None, length=1000)[1]

    keys = jax.random.split(jax.random.PRNGKey(SEED), episodes)
    r, obs = jax.jit(jax.vmap(rollout))(keys)
    return np.asarray(r, np.float64).sum(1), np.asarray(obs, np.float64)


def nodes(forms: list[sp.Expr]) -> list[int]:
    return [sum(1 for _ in sp.preorder_traversal(e)) for e in forms]


def pruned(e: sp.Expr, k: int, spread: dict[sp.Symbol, float]) -> sp.Expr:
    """tanh's argument (or -tanh's) with only its ``k`` heaviest single-observation linear terms."""
    sign, inner = (1, e.args[0]) if e.func == sp.tanh else (-1, (-e).args[0])
    terms = sp.Add.make_args(sp.expand(inner, mul=False, power_exp=False, multinomial=False, log=False))
    linear, other = [], []
    for t in terms:
        c, rest = t.as_coeff_Mul()
        (linear if rest in spread else other).append((abs(float(c)) * spread.get(rest, 0.0), t))
    kept = [t for _, t in sorted(linear, key=lambda wt: -wt[0])[:k]] + [t for _, t in other]
    return sign * sp.tanh(sp.Add(*kept))


def row(path: str, k: int | None, forms: list[sp.Expr], r: np.ndarray) -> str:
    return json.dumps({"policy": path, "k": k, "nodes": nodes(forms), "episodes": len(r),
                       "return": round(float(r.mean()), 1), "se": round(float(r.std() / np.sqrt(len(r))), 1),
                       "formulas": [str(f) for f in forms] if k is not None and k <= 8 else None})


if __name__ == "__main__":
    episodes, path, ks = int(sys.argv[1]), sys.argv[2], [int(k) for k in sys.argv[3:]]
    from replay_policy_txt import envs

    cheetah = envs.get_environment("halfcheetah", backend="generalized")
    full = formulas(path)
    r, obs = play(full, episodes, cheetah)
    spread = dict(zip(SYMS, obs.reshape(-1, len(NAMES)).std(0)))
    print(row(path, None, full, r), flush=True)
    for k in ks:
        forms = [pruned(e, k, spread) for e in full]
        print(row(path, k, forms, play(forms, episodes, cheetah)[0]), flush=True)
