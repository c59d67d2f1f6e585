"""Any registered Gymnasium id, its sub-environments made as ``gymnasium.make_vec`` makes them.

Only the live episodes are stepped: an ended one stays ended until ``reset()`` (the base class's rules), so a
batch whose episodes end at different times costs the steps actually played, not the longest episode times
the batch. A large batch is split into contiguous chunks, one worker process per core (``workers``), stepped
in parallel. ``reset(seed)`` seeds sub-environment ``i`` with ``seed + i``, exactly as ``gymnasium.vector``
does, so episodes are Gymnasium's own.

Names: any registered id, Gymnasium's ``module:EnvId`` (the module registers ``EnvId`` when imported), or an
entry point ``module:Class`` / ``module:factory`` (a user's own environment, registered here under
``gprl/module.Class``; :func:`resolve_id`).

Action spaces: ``Box`` (clipped to its bounds), ``Discrete`` (argmax over ``num_actions`` scores),
``MultiDiscrete`` and ``MultiBinary`` (an argmax per component over its own scores: ``action_segments``).
Observation spaces: ``Box``, ``Discrete`` (one-hot), ``MultiBinary``, ``MultiDiscrete`` (one-hot per
component) and ``Dict``/``Tuple`` of them, flattened as ``gymnasium.spaces.flatten`` does, with names from the
keys (:func:`flat_names`). Images and other spaces get a ``TypeError`` that names the space.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
from typing import Any

import numpy as np
import torch

from ._deps import require
from .base import VecEnv

# Gymnasium ids of the task names shared by the backends
SHARED_IDS = {
    "hopper": "Hopper-v5",
    "walker2d": "Walker2d-v5",
    "halfcheetah": "HalfCheetah-v5",
    "swimmer": "Swimmer-v5",
    "ant": "Ant-v5",
    "humanoid": "Humanoid-v5",
    "inverted_pendulum": "InvertedPendulum-v5",
    "inverted_double_pendulum": "InvertedDoublePendulum-v5",
    "reacher": "Reacher-v5",
}

# Box2D's lander: position and velocity of its body relative to the pad, its angle, the legs' contacts
LANDER_OBS_NAMES = ["x", "y", "vx", "vy", "angle", "angular_velocity", "left_leg_contact",
                    "right_leg_contact"]
# Observation names of the classic-control tasks (from Gymnasium's documentation of each observation)
CLASSIC_OBS_NAMES = {
    "CartPole": ["cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity"],
    "Pendulum": ["cos_theta", "sin_theta", "theta_dot"],
    "MountainCar": ["position", "velocity"],
    "MountainCarContinuous": ["position", "velocity"],
    "Acrobot": ["cos_theta1", "sin_theta1", "cos_theta2", "sin_theta2", "theta1_dot", "theta2_dot"],
    "LunarLander": LANDER_OBS_NAMES,
    "LunarLanderContinuous": LANDER_OBS_NAMES,
}


def registered_ids() -> list[str]:
    gym = require("gymnasium", "gymnasium")
    return sorted(gym.envs.registry.keys())


def _attribute(module: Any, path: str) -> Any:
    """``module.a.b`` for ``path`` ``"a.b"`` (None where a part is missing)."""
    for part in path.split("."):
        module = getattr(module, part, None)
    return module


def resolve_id(env_id: str) -> str:
    """The registered id to make for ``env_id``: itself, or for an entry point ``module:Class`` (or a factory)
    that Gymnasium's own ``module:EnvId`` does not name, ``gprl/module.Class`` registered here with it."""
    gym = require("gymnasium", "gymnasium")
    if ":" not in env_id:
        return env_id
    module, _, attr = env_id.partition(":")
    if os.getcwd() not in sys.path:  # as `python -m` would: the user's module where the command runs
        sys.path.append(os.getcwd())
    try:
        target = importlib.import_module(module)  # it may register ids (Gymnasium's module:EnvId)
    except ImportError as err:
        raise ValueError(f"env {env_id!r}: cannot import module {module!r} ({err}); run from the folder "
                         "that holds it or put it on PYTHONPATH") from None
    if attr in gym.envs.registry:
        return env_id
    own = "gprl/" + env_id.replace(":", ".")
    if own not in gym.envs.registry:
        target = _attribute(target, attr)
        if not callable(target):
            raise ValueError(f"env {env_id!r}: module {module!r} has no environment id, class or factory "
                             f"named {attr!r}")
        gym.register(id=own, entry_point=env_id)
    return own


def register_callable(env: Any) -> str:
    """The entry point ``module:qualname`` of a Gymnasium environment class or factory where it can be
    imported by that path, else an id registered in this process (``gprl/<name>-v<n>``)."""
    gym = require("gymnasium", "gymnasium")
    module, qualname = getattr(env, "__module__", None), getattr(env, "__qualname__", "")
    if module and module != "__main__" and "<" not in qualname \
            and _attribute(importlib.import_module(module), qualname) is env:
        return f"{module}:{qualname}"
    name = re.sub(r"\W", "_", getattr(env, "__name__", type(env).__name__))
    own = f"gprl/{name}-v{sum(k.startswith(f'gprl/{name}-v') for k in gym.envs.registry)}"
    gym.register(id=own, entry_point=env)
    return own


# what a tree reads: flattened spaces of numbers; an image is a picture for a network, not for a formula
IMAGE_DIMS = 2


def flat_names(space: Any, prefix: str = "") -> list[str]:
    """One name per entry of ``gymnasium.spaces.flatten(space, x)``, from the keys of Dict and the indices of
    Tuple spaces (``"velocity_1"``, ``"goal_x"``); raises a TypeError that names an unsupported space."""
    spaces = require("gymnasium", "gymnasium").spaces

    def join(*parts: object) -> str:
        return "_".join(str(p) for p in parts if str(p) != "")

    if isinstance(space, spaces.Dict):
        return [n for key, sub in space.spaces.items() for n in flat_names(sub, join(prefix, key))]
    if isinstance(space, spaces.Tuple):
        return [n for i, sub in enumerate(space.spaces) for n in flat_names(sub, join(prefix, i))]
    if isinstance(space, spaces.Box):
        if len(space.shape) >= IMAGE_DIMS and (space.dtype == np.uint8 or len(space.shape) > IMAGE_DIMS):
            raise TypeError(f"observation space {space} looks like an image, which a formula cannot read: "
                            "give the environment a vector observation (e.g. positions and velocities)")
        size = int(np.prod(space.shape))
        return [prefix or "obs"] if size == 1 else [join(prefix or "obs", i) for i in range(size)]
    if isinstance(space, spaces.Discrete):
        return [join(prefix or "obs", f"is{int(space.start) + k}") for k in range(int(space.n))]
    if isinstance(space, spaces.MultiBinary):
        return [join(prefix or "obs", i) for i in range(int(np.prod(space.shape)))]
    if isinstance(space, spaces.MultiDiscrete):
        return [join(prefix or "obs", i, f"is{int(s) + k}") for i, (n, s) in
                enumerate(zip(space.nvec.ravel(), space.start.ravel())) for k in range(int(n))]
    raise TypeError(f"observation space {space} is not supported: Box, Discrete, MultiBinary, MultiDiscrete "
                    "and Dict or Tuple of them")


def action_layout(space: Any) -> tuple[dict[str, Any], np.ndarray | np.int64 | None]:
    """The ``VecEnv`` action arguments for ``space``, and what is added to discrete choices (their starts)."""
    spaces = require("gymnasium", "gymnasium").spaces
    if isinstance(space, spaces.Box):
        if len(space.shape) != 1:
            raise TypeError(f"action space {space} is not supported: a Box action must be 1-D")
        return {"act_dim": space.shape[0], "action_low": torch.as_tensor(space.low, dtype=torch.float32),
                "action_high": torch.as_tensor(space.high, dtype=torch.float32)}, None
    if isinstance(space, spaces.Discrete):
        return {"act_dim": int(space.n), "num_actions": int(space.n)}, np.int64(space.start)
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        segments, start = [int(n) for n in space.nvec], space.start.astype(np.int64)
    elif isinstance(space, spaces.MultiBinary) and len(space.shape) == 1:
        segments, start = [2] * int(space.n), np.zeros(int(space.n), np.int64)
    else:
        raise TypeError(f"action space {space} is not supported: Box (1-D), Discrete, MultiDiscrete (1-D) or "
                        "MultiBinary (1-D)")
    # one score per choice of each component: a<component>_<choice>
    names = [f"a{i}_{int(s) + k}" for i, (n, s) in enumerate(zip(segments, start)) for k in range(n)]
    return {"act_dim": sum(segments), "num_actions": sum(segments), "action_segments": segments,
            "action_names": names}, start


def _obs_names(env_id: str, obs_dim: int) -> list[str] | None:
    base = env_id.split("/")[-1].split("-v")[0]
    names = CLASSIC_OBS_NAMES.get(base)
    if names is None:
        from .mujoco_tasks import TASKS, gymnasium_id_to_task  # MuJoCo v5 ids share the native names

        task = gymnasium_id_to_task(env_id)
        if task is not None and TASKS[task].version_matches(env_id):
            try:
                names = TASKS[task].default_obs_names()
            except ImportError:
                names = None
    return names if names is not None and len(names) == obs_dim else None


def _flat_obs(obs: list[Any]) -> np.ndarray:
    return np.asarray([np.asarray(o, dtype=np.float32).reshape(-1) for o in obs], dtype=np.float32)


class _Envs:
    """Sub-environments stepped one by one in this process; a step names the ones to step (the live ones)."""

    def __init__(self, make_env: Any, num_envs: int) -> None:
        self.envs = [make_env() for _ in range(num_envs)]

    def reset(self, seeds: list[int | None]) -> np.ndarray:
        return _flat_obs([env.reset(seed=s)[0] for env, s in zip(self.envs, seeds)])

    def step(self, ids: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        out = [self.envs[i].step(a)[:4] for i, a in zip(ids, actions)]
        return (_flat_obs([o[0] for o in out]), np.asarray([o[1] for o in out], dtype=np.float32),
                np.asarray([o[2] for o in out], dtype=bool), np.asarray([o[3] for o in out], dtype=bool))

    def close(self) -> None:
        for env in self.envs:
            env.close()


def _worker(conn: Any, make_env: Any, num_envs: int) -> None:
    """A worker process: its chunk of sub-environments, driven through ``conn`` by :class:`_Workers`."""
    try:
        envs = _Envs(make_env.fn, num_envs)
        conn.send(("ok", None))
        while True:
            method, args = conn.recv()
            if method == "close":
                envs.close()
                return
            conn.send(("ok", getattr(envs, method)(*args)))
    except Exception as err:  # noqa: BLE001 (sent to the parent, which raises it with the worker's traceback)
        import traceback

        conn.send(("error", f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))
    finally:
        conn.close()


class _Workers:
    """The sub-environments in contiguous chunks, one per worker process, stepped in parallel."""

    def __init__(self, make_env: Any, num_envs: int, workers: int) -> None:
        import multiprocessing as mp

        from gymnasium.vector.utils import CloudpickleWrapper

        self.bounds = np.linspace(0, num_envs, workers + 1).astype(int)
        self.conns, self.procs = [], []
        for a, b in zip(self.bounds[:-1], self.bounds[1:]):
            parent, child = mp.Pipe()
            proc = mp.Process(target=_worker, args=(child, CloudpickleWrapper(make_env), int(b - a)),
                              daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        self._gather(self.conns)

    def _died(self) -> RuntimeError:
        """A worker killed, or crashed in native code: no traceback comes back."""
        codes = [p.exitcode for p in self.procs if not p.is_alive()]
        self.close()
        return RuntimeError(f"a Gymnasium worker process died (exit codes {codes})")

    def _send(self, conn: Any, method: str, *args: Any) -> None:
        try:
            conn.send((method, args))
        except OSError:  # a broken pipe: the worker is gone
            raise self._died() from None

    def _gather(self, conns: list[Any]) -> list[Any]:
        try:
            replies = [conn.recv() for conn in conns]
        except EOFError:
            raise self._died() from None
        errors = [r[1] for r in replies if r[0] == "error"]
        if errors:
            self.close()
            raise RuntimeError(f"a Gymnasium worker process failed: {errors[0]}")
        return [r[1] for r in replies]

    def reset(self, seeds: list[int | None]) -> np.ndarray:
        for conn, a, b in zip(self.conns, self.bounds[:-1], self.bounds[1:]):
            self._send(conn, "reset", seeds[a:b])
        return np.concatenate(self._gather(self.conns))

    def step(self, ids: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        cuts = np.searchsorted(ids, self.bounds)
        busy = []
        for w, conn in enumerate(self.conns):
            a, b = cuts[w], cuts[w + 1]
            if a < b:
                self._send(conn, "step", ids[a:b] - self.bounds[w], actions[a:b])
                busy.append(conn)
        parts = self._gather(busy)
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(4))

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs):
            try:
                conn.send(("close", ()))
            except OSError:  # already gone
                pass
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
        self.conns, self.procs = [], []


# sub-environments per worker process below which the batch is stepped in this process (a message costs more)
MIN_ENVS_PER_WORKER = 16


class GymnasiumEnv(VecEnv):
    backend = "gymnasium"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str | None = None,
        seed: int = 0,
        episode_length: int | None = None,
        workers: int | None = None,
        **env_kwargs: Any,
    ) -> None:
        gym = require("gymnasium", "gymnasium")

        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
            raise ValueError(f"workers must be a non-negative int (0: step in this process) or None (one per "
                             f"core when the batch is large enough), got {workers!r}")
        make_id = resolve_id(env_id)
        spec = gym.spec(make_id)
        limit = episode_length if episode_length is not None else spec.max_episode_steps
        if limit is None:
            raise ValueError(f"{env_id} has no time limit of its own: set one (env.episode_length=N in "
                             "train.py, episode_length=N in gprl.envs.make)")
        try:
            probe = gym.make(make_id, **env_kwargs)
        except gym.error.DependencyNotInstalled as err:  # e.g. Box2D: Gymnasium's message names the fix
            raise ImportError(f"{env_id}: {err}") from None
        obs_space, act_space = probe.observation_space, probe.action_space
        probe.close()
        names = flat_names(obs_space)  # a TypeError names an unsupported space before any worker starts
        act_kw, self._act_start = action_layout(act_space)
        # a non-vector observation is flattened in each sub-environment (Dict, Tuple, one-hot, n-d Box)
        flat = not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1)
        # each sub-environment as gymnasium.make_vec makes it
        make_env = functools.partial(_make_env, make_id, limit, flat, env_kwargs)
        self._act_dtype = act_space.dtype
        super().__init__(
            name=env_id,
            num_envs=num_envs,
            obs_dim=len(names),
            device=torch.device(device) if device is not None else torch.device("cpu"),
            episode_length=limit,
            seed=seed,
            obs_names=_obs_names(env_id, len(names)) or (names if flat else None),
            **act_kw,
        )
        if workers is None:
            workers = min(len(os.sched_getaffinity(0)), num_envs // MIN_ENVS_PER_WORKER)
        self.workers = workers if workers > 1 else 0  # started last: nothing above can leave them running
        self.envs = _Workers(make_env, num_envs, self.workers) if self.workers else _Envs(make_env, num_envs)

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(obs.copy()).to(self.device)

    def _reset(self, seed: int | None, starts: int | None = None) -> torch.Tensor:
        seeds = self.env_seeds(seed, starts) if seed is not None else [None] * self.num_envs
        self._last_obs = self.envs.reset(seeds)
        return self._obs(self._last_obs)

    def _step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        # only the live episodes are stepped: an ended one stays ended until reset() (the base class's rules)
        ids = np.flatnonzero(~self.done.cpu().numpy())
        if self.discrete:
            act = action.cpu().numpy()[ids] + self._act_start
        else:
            act = action.cpu().numpy()[ids].astype(self._act_dtype, copy=False)
        reward = np.zeros(self.num_envs, np.float32)
        terminated, truncated = np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool)
        if len(ids):
            self._last_obs[ids], reward[ids], terminated[ids], truncated[ids] = self.envs.step(ids, act)
        dev = self.device
        return self._obs(self._last_obs), torch.from_numpy(reward).to(dev), \
            torch.from_numpy(terminated).to(dev), torch.from_numpy(truncated).to(dev)

    def close(self) -> None:
        self.envs.close()


def _make_env(make_id: str, limit: int, flat: bool, env_kwargs: dict[str, Any]) -> Any:
    gym = require("gymnasium", "gymnasium")
    env = gym.make(make_id, max_episode_steps=limit, **env_kwargs)
    return gym.wrappers.FlattenObservation(env) if flat else env
