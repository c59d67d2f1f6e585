"""Vectorised environments behind one protocol (:class:`VecEnv`), for evaluating populations of policies.

    env = gprl.envs.make("hopper", backend="mujoco", num_envs=1024, seed=0)
    obs = env.reset()                                      # [N, obs_dim] float32 on env.device
    obs, reward, terminated, truncated = env.step(action)  # action [N, act_dim] on env.device

Backends (each an optional pip extra, imported only when used):

* ``gymnasium``: any registered Gymnasium id through its vector API (``pip install -e ".[gymnasium]"``)
* ``mujoco``: native batched MuJoCo, the Gymnasium v5 tasks bit for bit (``pip install -e ".[mujoco]"``)
* ``classic``: native batched NumPy, Gymnasium's classic-control tasks (CartPole, Pendulum, MountainCar,
  MountainCarContinuous, Acrobot) bit for bit (``pip install -e ".[gymnasium]"``)
* ``brax``: Brax and MuJoCo Playground on JAX (GPU), tensors shared through DLPack
  (``pip install -e ".[brax]"``)
* ``genesis``: Genesis scenes, torch tensors on the device (``pip install -e ".[genesis]"``)

Task names shared by the backends: :data:`SHARED_TASKS`; any id a backend knows is accepted too.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from typing import Any

import torch

from ._deps import available
from .base import VecEnv
from .rollout import RolloutResult, rollout

__all__ = ["BACKENDS", "SHARED_TASKS", "RolloutResult", "VecEnv", "make", "register", "rollout",
           "task_names"]

BACKENDS = ("gymnasium", "mujoco", "classic", "brax", "genesis")

#: task names shared across backends → the backends that have them
SHARED_TASKS: dict[str, tuple[str, ...]] = {
    "hopper": ("mujoco", "gymnasium", "brax"),
    "walker2d": ("mujoco", "gymnasium", "brax"),
    "halfcheetah": ("mujoco", "gymnasium", "brax"),
    "swimmer": ("mujoco", "gymnasium", "brax"),
    "ant": ("mujoco", "gymnasium", "brax"),
    "humanoid": ("mujoco", "gymnasium", "brax"),
    "inverted_pendulum": ("mujoco", "gymnasium", "brax"),
    "inverted_double_pendulum": ("mujoco", "gymnasium", "brax"),
    "reacher": ("mujoco", "gymnasium", "brax"),
}

_EXTRA_MODULE = {"gymnasium": "gymnasium", "mujoco": "mujoco", "classic": "gymnasium", "brax": "brax",
                 "genesis": "genesis"}


def _backend_names(backend: str) -> list[str]:
    """Ids the backend itself knows (empty when its package is not installed)."""
    if not available(_EXTRA_MODULE[backend]):
        return []
    if backend == "gymnasium":
        from .gymnasium_env import registered_ids

        return registered_ids()
    if backend == "mujoco":
        from .mujoco_tasks import TASKS

        return sorted(TASKS)
    if backend == "classic":
        from .classic_env import TASKS as CLASSIC_TASKS

        return sorted(CLASSIC_TASKS)
    if backend == "brax":
        from .brax_env import known_names

        return known_names()
    from .genesis_env import GENESIS_TASKS

    return sorted(GENESIS_TASKS)


def task_names(backend: str | None = None) -> list[str]:
    """Task names accepted by ``make`` (for one backend, or all installed backends)."""
    if backend is not None:
        _check_backend(backend)
        return sorted(set([t for t, bs in SHARED_TASKS.items() if backend in bs] + _backend_names(backend)))
    return sorted(set(SHARED_TASKS).union(*(_backend_names(b) for b in BACKENDS)))


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS and backend != "auto":
        raise ValueError(f"unknown backend {backend!r}; choose one of {['auto', *BACKENDS]}")


def _unknown_task(name: str, backend: str) -> ValueError:
    choices = task_names(None if backend == "auto" else backend)
    close = difflib.get_close_matches(name, choices, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    where = "any installed backend" if backend == "auto" else f"backend {backend!r}"
    return ValueError(
        f"unknown task {name!r} for {where}.{hint} Shared names: {', '.join(sorted(SHARED_TASKS))}; a "
        f"Gymnasium id, a Brax, Playground or Genesis name (gprl.envs.task_names() lists the {len(choices)} "
        "installed), or a module:Class entry point of your own environment."
    )


def _gpu_jax() -> bool:
    """Whether Brax can run on a GPU here (CUDA torch and a JAX with a GPU device)."""
    if not (torch.cuda.is_available() and available("jax") and available("brax")):
        return False
    from .brax_env import jax_has_gpu

    return jax_has_gpu()


def auto_backend(name: str) -> str:
    if name in SHARED_TASKS:
        # DESIGN: Brax on a CUDA machine with GPU JAX, native MuJoCo otherwise
        if _gpu_jax():
            return "brax"
        for b in ("mujoco", "gymnasium"):
            if available(_EXTRA_MODULE[b]):
                return b
        raise ImportError(
            f'no backend for {name!r} is installed; install one, e.g. pip install -e ".[mujoco]" '
            f"(or .[brax], .[gymnasium])"
        )
    if ":" in name:  # an entry point, module:Class or Gymnasium's module:EnvId
        return "gymnasium"
    if name in _backend_names("classic"):  # Gymnasium's classic-control ids, the same tasks batched
        return "classic"
    if available("mujoco"):  # Gymnasium's MuJoCo v5 ids: the native backend steps them bit for bit
        from .mujoco_tasks import gymnasium_id_to_task

        if gymnasium_id_to_task(name):
            return "mujoco"
    for b in ("gymnasium", "brax", "genesis"):
        if name in _backend_names(b):
            return b
    raise _unknown_task(name, "auto")


def _factory(backend: str) -> Callable[..., VecEnv]:
    if backend == "gymnasium":
        from .gymnasium_env import SHARED_IDS, GymnasiumEnv

        return lambda name, **kw: GymnasiumEnv(SHARED_IDS.get(name, name), **kw)
    if backend == "mujoco":
        from .mujoco_env import MujocoEnv
        from .mujoco_tasks import gymnasium_id_to_task

        return lambda name, **kw: MujocoEnv(gymnasium_id_to_task(name) or name, **kw)
    if backend == "classic":
        from .classic_env import ClassicEnv

        return ClassicEnv
    if backend == "brax":
        from .brax_env import BraxEnv

        return BraxEnv
    from .genesis_env import GenesisEnv

    return GenesisEnv


def register(env: Any) -> str:
    """A name :func:`make` (and ``train.py env=<name>``) takes for a user's own environment: a Gymnasium
    environment class or a factory returning one (``module:Class`` where it can be imported by that path, so
    other processes find it too; else registered in this process's Gymnasium registry), or a Brax environment
    object (registered in this process's Brax registry). A name passes through."""
    if isinstance(env, str):
        return env
    brax_envs = sys.modules.get("brax.envs")  # a Brax object means Brax is imported already
    if brax_envs is not None and isinstance(env, brax_envs.Env):
        from .brax_env import register_object

        return register_object(env)
    if not callable(env):
        raise TypeError("env must be a name, a Gymnasium environment class or factory, or a Brax "
                        f"environment object, got {type(env).__name__}")
    from .gymnasium_env import register_callable

    return register_callable(env)


def make(
    name: str,
    backend: str = "auto",
    num_envs: int = 1,
    device: torch.device | str | None = None,
    seed: int = 0,
    episode_length: int | None = None,
    **task_kwargs: Any,
) -> VecEnv:
    """Create ``num_envs`` environments of task ``name`` on ``backend``.

    Args:
        name: a shared task name (:data:`SHARED_TASKS`) or an id the backend knows (a Gymnasium id such as
            ``"CartPole-v1"``, a Brax or MuJoCo Playground name, a Genesis task of :mod:`.genesis_env`), or an
            entry point ``"module:Class"`` of a user's own Gymnasium environment (or ``module:factory``).
        backend: ``"auto"`` (Brax with a GPU JAX, else native MuJoCo, else Gymnasium; native classic control
            for Gymnasium's classic-control ids; for other ids the backend that knows them), or one of
            :data:`BACKENDS`.
        num_envs: batch size N.
        device: where observations, rewards and actions live (default: the backend's natural device).
        seed: seed of the first ``reset()`` (``reset(seed)`` overrides it).
        episode_length: time limit in steps (default: the task's own, e.g. 1000 for the locomotion tasks).
        **task_kwargs: passed to the task (e.g. Gymnasium's ``ctrl_cost_weight=``).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a task name (str), got {type(name).__name__}")
    _check_backend(backend)
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if episode_length is not None and (not isinstance(episode_length, int) or episode_length < 1):
        raise ValueError(f"episode_length must be a positive int or None, got {episode_length!r}")
    if backend == "auto":
        backend = auto_backend(name)
    elif not (name in SHARED_TASKS and backend in SHARED_TASKS[name]) and available(_EXTRA_MODULE[backend]) \
            and not (backend == "gymnasium" and ":" in name):
        known = _backend_names(backend)
        if backend == "mujoco":
            from .mujoco_tasks import gymnasium_id_to_task

            known = known + ([name] if gymnasium_id_to_task(name) else [])
        if name not in known:
            raise _unknown_task(name, backend)
    return _factory(backend)(
        name, num_envs=num_envs, device=device, seed=seed, episode_length=episode_length, **task_kwargs
    )
