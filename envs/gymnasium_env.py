"""Any registered Gymnasium id, stepped through Gymnasium's vector API.

The vector env runs in NEXT_STEP autoreset mode, but the autoreset never reaches the caller: the base class
keeps an ended episode ended (flags stay set, reward 0) until ``reset()``, so whatever the vector env does
with that sub-environment afterwards (its hidden reset and new episode) is ignored. ``reset(seed)`` seeds
sub-environment ``i`` with ``seed + i``, exactly as ``gymnasium.vector`` does.

Action spaces: ``Box`` (clipped to its bounds) and ``Discrete`` (argmax over ``num_actions`` outputs).
Observation spaces: ``Box`` (flattened) and ``Discrete`` (one-hot).
"""

from __future__ import annotations

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

# Observation names of the classic-control tasks (from Gymnasium's documentation of each observation)
CLASSIC_OBS_NAMES = {
    "CartPole": ["cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity"],
    "Pendulum": ["cos_theta", "sin_theta", "theta_dot"],
    "MountainCar": ["position", "velocity"],
    "MountainCarContinuous": ["position", "velocity"],
    "Acrobot": ["cos_theta1", "sin_theta1", "cos_theta2", "sin_theta2", "theta1_dot", "theta2_dot"],
}


def registered_ids() -> list[str]:
    gym = require("gymnasium", "gymnasium")
    return sorted(gym.envs.registry.keys())


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


class GymnasiumEnv(VecEnv):
    backend = "gymnasium"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str | None = None,
        seed: int = 0,
        episode_length: int | None = None,
        vectorization_mode: str = "sync",
        **env_kwargs: Any,
    ) -> None:
        gym = require("gymnasium", "gymnasium")
        from gymnasium.vector import AutoresetMode

        if vectorization_mode not in ("sync", "async"):
            raise ValueError(f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}")
        spec = gym.spec(env_id)
        limit = episode_length if episode_length is not None else spec.max_episode_steps
        if limit is None:
            raise ValueError(f"{env_id} has no time limit of its own: pass episode_length=")
        self.vec = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP},
            max_episode_steps=limit,
            **env_kwargs,
        )
        obs_space, act_space = self.vec.single_observation_space, self.vec.single_action_space
        spaces = gym.spaces
        if isinstance(obs_space, spaces.Box):
            obs_dim, self._obs_onehot = int(np.prod(obs_space.shape)), None
        elif isinstance(obs_space, spaces.Discrete):
            obs_dim, self._obs_onehot = int(obs_space.n), int(obs_space.start)
        else:
            raise TypeError(
                f"{env_id}: observation space {obs_space} is not supported (Box or Discrete only)"
            )
        if isinstance(act_space, spaces.Box):
            if len(act_space.shape) != 1:
                raise TypeError(f"{env_id}: only 1-D Box action spaces are supported, got {act_space}")
            act_kw: dict[str, Any] = {
                "act_dim": act_space.shape[0],
                "action_low": torch.as_tensor(act_space.low, dtype=torch.float32),
                "action_high": torch.as_tensor(act_space.high, dtype=torch.float32),
            }
            self._act_dtype = act_space.dtype
        elif isinstance(act_space, spaces.Discrete):
            act_kw = {"act_dim": int(act_space.n), "num_actions": int(act_space.n)}
            self._act_start = int(act_space.start)
        else:
            raise TypeError(f"{env_id}: action space {act_space} is not supported (Box or Discrete only)")
        super().__init__(
            name=env_id,
            num_envs=num_envs,
            obs_dim=obs_dim,
            device=torch.device(device) if device is not None else torch.device("cpu"),
            episode_length=limit,
            seed=seed,
            obs_names=_obs_names(env_id, obs_dim),
            **act_kw,
        )

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        if self._obs_onehot is not None:
            idx = torch.as_tensor(np.asarray(obs) - self._obs_onehot, dtype=torch.long)
            return torch.nn.functional.one_hot(idx, self.obs_dim).to(self.device, torch.float32)
        return torch.as_tensor(np.asarray(obs).reshape(self.num_envs, -1)).to(self.device, torch.float32)

    def _reset(self, seed: int | None) -> torch.Tensor:
        obs, _ = self.vec.reset(seed=seed)
        return self._obs(obs)

    def _step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.discrete:
            act = action.cpu().numpy() + self._act_start
        else:
            act = action.cpu().numpy().astype(self._act_dtype, copy=False)
        obs, reward, terminated, truncated, _ = self.vec.step(act)
        dev = self.device
        return (
            self._obs(obs),
            torch.as_tensor(np.asarray(reward, dtype=np.float32)).to(dev),
            torch.as_tensor(np.asarray(terminated, dtype=bool)).to(dev),
            torch.as_tensor(np.asarray(truncated, dtype=bool)).to(dev),
        )

    def close(self) -> None:
        self.vec.close()
