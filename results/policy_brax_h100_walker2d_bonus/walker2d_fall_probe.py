"""How a Brax Walker2d policy's episodes end: its readable formulas (policy.txt) on fresh 1000-step episodes
of the generalized pipeline on JAX's default device.
``python walker2d_fall_probe.py ends EPISODES SEED policy.txt``: each early end's step, torso height and
pitch, and the lowest height of the episodes that hold;
``python walker2d_fall_probe.py smooth EPISODES SEED policy.txt K...``: the return and early ends with every
``gt(a, b)`` played as ``tanh(K (a - b))`` (K = 0: the step function itself). A JSON line per result."""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy_brax_swimmer_refine_constants"))
import jax
import jax.numpy as jnp
from brax import envs
from gprl.envs.brax_env import _obs_names
from replay_policy_txt import MODULES, policy  # patches Brax for JAX


def rollouts(act, env, episodes: int, seed: int):
    """Per step of each episode: reward (0 after the step that ended it), alive after the step, torso height
    and pitch."""
    def rollout(key):
        def body(carry, _):
            state, alive = carry
            state = env.step(state, act(state.obs))
            ps, after = state.pipeline_state, alive & (state.done < 0.5)
            return (state, after), (jnp.where(alive, state.reward, 0.0), after, ps.x.pos[0, 2], ps.q[2])
        return jax.lax.scan(body, (env.reset(key), jnp.array(True)), None, length=1000)[1]

    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    return [np.asarray(a) for a in jax.jit(jax.vmap(rollout))(keys)]


def ends(act, env, episodes: int, seed: int) -> dict:
    r, alive, z, pitch = rollouts(act, env, episodes, seed)
    last = alive.sum(1)  # the index of the step that ended the episode (1000: it held)
    held = last == 1000
    falls = [{"step": int(k), "height": round(float(z[i, k]), 3), "pitch": round(float(pitch[i, k]), 3)}
             for i, k in enumerate(last) if k < 1000]
    return {"episodes": episodes, "mean": round(float(r.sum(1).mean()), 1), "ended": len(falls),
            "falls": falls,
            "held_lowest_height_min_p5_p50": np.percentile(z[held].min(1), [0, 5, 50]).round(3).tolist()}


def smooth(act_of, env, episodes: int, seed: int, k: float) -> dict:
    MODULES[0]["gt"] = ((lambda a, b: jnp.where(a > b, 1.0, -1.0)) if k == 0
                        else (lambda a, b: jnp.tanh(k * (a - b))))
    r, alive, _, _ = rollouts(act_of(), env, episodes, seed)
    ret = r.sum(1)
    return {"k": k, "episodes": episodes, "mean": round(float(ret.mean()), 1),
            "se": round(float(ret.std() / np.sqrt(episodes)), 1),
            "ended": float((alive.sum(1) < 1000).mean()),
            "below_1500": float((ret < 1500).mean())}


if __name__ == "__main__":
    mode, episodes, seed, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    env = envs.get_environment("walker2d", backend="generalized")
    names = _obs_names("walker2d", env, env.observation_size)
    if mode == "ends":
        print(json.dumps({"policy": path, **ends(policy(path, names), env, episodes, seed)}), flush=True)
    else:
        for k in map(float, sys.argv[5:]):
            print(json.dumps({"policy": path, **smooth(lambda: policy(path, names), env, episodes, seed, k)}),
                  flush=True)
