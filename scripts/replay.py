"""Run an exported policy in the real environment, without gprl: \
``python scripts/replay.py <run dir | policy.py>``.

Loads ``policy.py`` (NumPy only), plays ``--episodes`` episodes in Gymnasium (runs trained on the MuJoCo or
Gymnasium backends) or Brax and MuJoCo Playground (runs trained on Brax) and prints the mean return.
``--reproduce`` replays the validation episodes recorded at export (same initial states) and prints the
recorded value beside it; ``--render out.mp4`` records the first episode.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np

GYM_IDS = {"hopper": "Hopper-v5", "walker2d": "Walker2d-v5", "halfcheetah": "HalfCheetah-v5",
           "swimmer": "Swimmer-v5", "ant": "Ant-v5", "humanoid": "Humanoid-v5",
           "inverted_pendulum": "InvertedPendulum-v5",
           "inverted_double_pendulum": "InvertedDoublePendulum-v5", "reacher": "Reacher-v5"}


def load_policy(path: str | os.PathLike):
    """The policy module of a run directory or a policy.py file."""
    path = Path(path)
    if path.is_dir():
        path = path / "policy.py"
    if not path.is_file():
        raise SystemExit(f"replay: no policy at {str(path)!r}; pass a run directory or its policy.py")
    spec = importlib.util.spec_from_file_location(f"gprl_policy_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gymnasium_id(env_id: str) -> str:
    """What to make for a run's environment: its Gymnasium id, or for an entry point ``module:Class`` (a
    user's own environment, imported from the current folder too) the id gprl registered it under,
    registered here the same way."""
    import importlib

    import gymnasium as gym

    if ":" not in env_id:
        return env_id
    module, _, attr = env_id.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    importlib.import_module(module)  # may register its own ids (Gymnasium's module:EnvId)
    if attr in gym.envs.registry:
        return env_id
    own = "gprl/" + env_id.replace(":", ".")
    if own not in gym.envs.registry:
        gym.register(id=own, entry_point=env_id)
    return own


def replay_gymnasium(policy, meta: dict, episodes: int, seed: int, episode_length: int,
                     render: str | None = None) -> list[float]:
    """Episode e starts from ``reset(seed=seed + e)``
    (gprl's MuJoCo backend seeds environment i with seed + i)."""
    import gymnasium as gym

    env_id = gymnasium_id(GYM_IDS.get(meta["env"], meta["env"]))
    kwargs = dict(meta.get("env_kwargs") or {})
    if render:
        kwargs["render_mode"] = "rgb_array"
    env = gym.make(env_id, max_episode_steps=episode_length, **kwargs)
    if not (isinstance(env.observation_space, gym.spaces.Box) and len(env.observation_space.shape) == 1):
        env = gym.wrappers.FlattenObservation(env)  # as gprl's adapter reads Dict, Tuple, Discrete, ...
    returns, frames = [], []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        total, done = 0.0, False
        while not done:
            if render and e == 0:
                frames.append(env.render())
            obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    if render:
        write_video(render, frames, fps=float(round(1 / float(env.unwrapped.dt))))
    return returns


def replay_brax(policy, meta: dict, episodes: int, seed: int, episode_length: int,
                render: str | None = None) -> list[float]:
    """All episodes as one vmapped batch on JAX's default device; ended episodes stop counting reward."""
    import jax
    import jax.numpy as jnp
    from brax import envs

    _brax_clip_compat()
    kwargs = dict(meta.get("env_kwargs") or {})
    pipeline = kwargs.pop("pipeline", "generalized")
    kwargs.pop("cuda_graphs", None)  # gprl's compile option, not Brax's
    if meta["env"] in envs._envs:
        env = envs.get_environment(meta["env"], backend=pipeline or "generalized", **kwargs)
    else:  # a MuJoCo Playground task, on MJX's JAX implementation as in training
        from mujoco_playground import registry

        env = registry.load(meta["env"], config_overrides={"impl": "jax", **kwargs})
    reset, step = jax.jit(jax.vmap(env.reset)), jax.jit(jax.vmap(env.step))
    state = reset(jax.random.split(jax.random.PRNGKey(seed), episodes))
    total, alive = np.zeros(episodes), np.ones(episodes, dtype=bool)
    rollout = []
    for _ in range(episode_length):
        action = np.asarray(policy.act(np.asarray(state.obs)), dtype=np.float32)
        state = step(state, jnp.asarray(action))
        total += np.where(alive, np.asarray(state.reward), 0.0)
        alive &= np.asarray(state.done) < 0.5
        if render:  # Brax keeps the simulator state in pipeline_state, Playground in data
            sim = state.pipeline_state if hasattr(state, "pipeline_state") else state.data
            rollout.append(jax.tree_util.tree_map(lambda x: x[0], sim))
        if not alive.any():
            break
    if render:
        if hasattr(env, "sys"):
            from brax.io import image

            frames = image.render_array(env.sys, rollout, 320, 240)
        else:
            frames = env.render(rollout, height=240, width=320)
        write_video(render, frames, fps=float(round(1 / float(env.dt))))
    return total.tolist()


def _brax_clip_compat() -> None:
    """Brax 0.14's fluid forces (the swimmer) call ``jnp.clip(x, a_min=...)``, which JAX 0.10 rejects:
    brax.fluid alone gets a jax.numpy whose clip takes a_min/a_max (what gprl.envs.brax_env.patch_brax_for_jax
    does, here without gprl)."""
    import inspect

    import jax.numpy as jnp
    from brax import fluid

    if fluid.jp is not jnp or "a_min" in inspect.signature(jnp.clip).parameters:
        return

    class _Numpy:
        def __getattr__(self, name: str):
            return getattr(jnp, name)

        @staticmethod
        def clip(x, min=None, max=None, *, a_min=None, a_max=None):
            return jnp.clip(x, a_min if min is None else min, a_max if max is None else max)

    fluid.jp = _Numpy()


def write_video(path: str, frames, fps: int) -> None:
    import imageio.v2 as imageio

    imageio.mimwrite(path, [np.asarray(f) for f in frames], fps=fps, macro_block_size=1)
    print(f"video: {path} ({len(frames)} frames)")


def check_render() -> None:
    """Exits with one line naming the fix where this machine cannot render offscreen (no EGL or OSMesa)."""
    # headless rendering; must precede the first import of mujoco
    gl = os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        import mujoco

        context = mujoco.GLContext(64, 64)
        context.make_current()
        context.free()
    except Exception as err:  # noqa: BLE001 - any failure here means: no usable OpenGL
        raise SystemExit(
            f"replay: cannot render on this machine (MUJOCO_GL={gl}: {type(err).__name__}); install EGL "
            "(apt-get install libegl1) or OSMesa (apt-get install libosmesa6, then MUJOCO_GL=osmesa), "
            "or replay without --render") from None


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("policy", help="a run directory or an exported policy.py")
    ap.add_argument("--episodes", type=int, default=None, help="episodes to play (default 10)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed of the first episode (default: fresh, 10_000_019)")
    ap.add_argument("--episode-length", type=int, default=None, help="time limit (default: the run's)")
    ap.add_argument("--backend", choices=["gymnasium", "brax"], default=None,
                    help="simulator (default: Brax for Brax runs, Gymnasium otherwise)")
    ap.add_argument("--reproduce", action="store_true", help="replay the recorded validation episodes")
    ap.add_argument("--render", metavar="OUT.mp4", default=None, help="record the first episode")
    ap.add_argument("--wandb", action="store_true", help="log the rendered video to the run's W&B run")
    args = ap.parse_args(argv)
    policy = load_policy(args.policy)
    meta = json.loads(policy.META)
    backend = args.backend or ("brax" if meta.get("backend") == "brax" else "gymnasium")
    length = args.episode_length or int(meta["episode_length"])
    recorded = None
    if args.reproduce:
        val = meta["validation"]
        seed, episodes, recorded = (int(val["validation_seed"]), int(val["validation_episodes"]),
                                    val["validation_return"])
        if backend == "brax":
            print("note: Brax episodes are keyed differently from training; "
                  "--reproduce is exact on Gymnasium/MuJoCo")
    else:
        seed = 10_000_019 if args.seed is None else args.seed
        episodes = args.episodes or 10
    if episodes < 1 or length < 1:
        raise SystemExit("replay: --episodes and --episode-length must be >= 1")
    if args.render:
        check_render()
    fn = replay_brax if backend == "brax" else replay_gymnasium
    returns = fn(policy, meta, episodes, seed, length, args.render)
    out = {"env": meta["env"], "backend": backend, "episodes": episodes, "seed": seed,
           "episode_length": length, "mean_return": float(np.mean(returns)),
           "std_return": float(np.std(returns)), "returns": returns}
    if recorded is not None:
        out["recorded_return"] = recorded
    print(json.dumps(out))
    if args.render and args.wandb:
        log_video_to_run(Path(args.policy), args.render, out)
    return out


def log_video_to_run(run_dir: Path, video: str, result: dict) -> None:
    """Adds the video and the replayed return to the training run's W&B run (same id, resumed)."""
    summary = run_dir / "summary.json" if run_dir.is_dir() else run_dir.parent / "summary.json"
    info = json.loads(summary.read_text()).get("wandb", {}) if summary.exists() else {}
    if not info.get("id") or info.get("mode") == "disabled":
        print("replay: the run has no W&B run to log the video to (wandb.mode=disabled?)")
        return
    import wandb

    run = wandb.init(id=info["id"], resume="allow", mode=info["mode"], project=info.get("project"),
                     entity=info.get("entity"), dir=str(summary.parent), settings=wandb.Settings(silent=True))
    run.log({"replay_video": wandb.Video(video, format="mp4"), "replay_mean_return": result["mean_return"]})
    run.finish()


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
