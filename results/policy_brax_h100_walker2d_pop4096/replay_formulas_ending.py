"""Plays Brax policies' readable formulas (policy.txt: 4 significant digits, raw observation units) on fresh
1000-step episodes of the generalized pipeline on JAX's default device, for tasks whose episodes end: an
episode that ends (a fall) adds no reward after its last step. The formulas are read by
``policy_brax_swimmer_refine_constants/replay_policy_txt.py``.
``python replay_formulas_ending.py TASK EPISODES SEED policy.txt...`` prints a JSON line per file."""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy_brax_swimmer_refine_constants"))
import jax
import jax.numpy as jnp
from brax import envs
from gprl.envs.brax_env import _obs_names
from replay_policy_txt import policy  # patches Brax for JAX


def returns(act, env, episodes: int, seed: int) -> np.ndarray:
    """The return of each of ``episodes`` fresh 1000-step episodes from ``PRNGKey(seed)``."""
    def rollout(key):
        def body(carry, _):
            state, alive = carry
            state = env.step(state, act(state.obs))
            return (state, alive & (state.done < 0.5)), jnp.where(alive, state.reward, 0.0)
        return jax.lax.scan(body, (env.reset(key), jnp.array(True)), None, length=1000)[1].sum()

    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    return np.asarray(jax.jit(jax.vmap(rollout))(keys), np.float64)


if __name__ == "__main__":
    task, episodes, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    env = envs.get_environment(task, backend="generalized")
    names = _obs_names(task, env, env.observation_size)
    for path in sys.argv[4:]:
        r = returns(policy(path, names), env, episodes, seed)
        print(json.dumps({"policy": path, "episodes": episodes, "mean": round(float(r.mean()), 1),
                          "std": round(float(r.std()), 1), "se": round(float(r.std() / np.sqrt(episodes)), 1),
                          "below_1500": float((r < 1500).mean()), "median": round(float(np.median(r)), 1)}),
              flush=True)
