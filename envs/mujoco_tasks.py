"""The Gymnasium v5 MuJoCo tasks, written once over a batch of simulations.

Each task reproduces its Gymnasium v5 environment exactly: the same XML file (read from Gymnasium's assets),
the same frame skip, observation, reward, termination and reset noise, and the same keyword arguments and
defaults. The formulas are NumPy over ``[n, ...]`` arrays (float64, as Gymnasium computes them); a task reads
the bound fields of a :class:`mujoco.batch.Batch` through a :class:`State`.

As in Gymnasium (``mj_step`` then ``mj_rnePostConstraint``), derived fields (``xpos``, ``cfrc_ext``, ...)
describe the state *before the last substep*; the batch gives them that way too. Gymnasium's reset runs
``mj_forward`` only, so ``cfrc_ext`` is 0 in the first observation; the tasks that observe it do the same.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np


@dataclass
class State:
    """What a task reads: the batch's state rows and derived fields for the simulations of a call."""

    model: Any  # mujoco.MjModel
    qpos: np.ndarray  # [n, nq]
    qvel: np.ndarray  # [n, nv]
    fields: dict[str, np.ndarray]  # derived fields, [n, ...]
    at_reset: bool = False


def gymnasium_asset(xml_file: str) -> str:
    """Path of a Gymnasium MuJoCo asset, resolved as Gymnasium's MujocoEnv does."""
    if xml_file.startswith("/") or os.path.exists(xml_file):
        return xml_file
    from ._deps import require

    gym_mujoco = require("gymnasium.envs.mujoco", "mujoco")
    return os.path.join(os.path.dirname(gym_mujoco.__file__), "assets", xml_file)


def _ident(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _joint_names(model: Any, free: tuple[str, ...], ball: tuple[str, ...], hinge: str) -> list[str]:
    """One name per coordinate of every joint: the joint's name plus ``free``'s or ``ball``'s suffixes, or
    plus ``hinge`` for a one-coordinate joint."""
    import mujoco

    names: list[str] = []
    for j in range(model.njnt):
        jn = _ident(model.joint(j).name or f"joint{j}")
        kind = model.jnt_type[j]
        if kind == mujoco.mjtJoint.mjJNT_FREE:
            names += [f"{jn}_{s}" for s in free]
        elif kind == mujoco.mjtJoint.mjJNT_BALL:
            names += [f"{jn}_{s}" for s in ball]
        else:
            names.append(jn + hinge)
    return names


def qpos_names(model: Any) -> list[str]:
    return _joint_names(model, ("x", "y", "z", "qw", "qx", "qy", "qz"), ("qw", "qx", "qy", "qz"), "")


def qvel_names(model: Any) -> list[str]:
    return _joint_names(model, ("vx", "vy", "vz", "wx", "wy", "wz"), ("wx", "wy", "wz"), "_vel")


def body_names(model: Any, field: str, suffixes: tuple[str, ...]) -> list[str]:
    """Names for a per-body field of bodies 1..nbody-1 (the world body is never observed)."""
    out = []
    for b in range(1, model.nbody):
        bn = _ident(model.body(b).name or f"body{b}")
        out += [f"{field}_{bn}_{s}" for s in suffixes]
    return out


SPATIAL = ("rx", "ry", "rz", "x", "y", "z")  # MuJoCo's spatial vectors: rotation first


class Task:
    """A Gymnasium v5 MuJoCo task; subclasses define the formulas."""

    name: ClassVar[str]
    gym_id: ClassVar[str]
    defaults: ClassVar[dict[str, Any]]
    #: derived MjData fields the task reads after a step
    fields: ClassVar[tuple[str, ...]] = ()
    #: needs cfrc_ext, which MuJoCo computes only in mj_rnePostConstraint
    needs_rne_post: ClassVar[bool] = False

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self.defaults)
        if unknown:
            raise TypeError(
                f"unknown keyword argument(s) {sorted(unknown)} for task {self.name!r}; "
                f"it takes {sorted(self.defaults)} (as Gymnasium's {self.gym_id})"
            )
        self.params = {**self.defaults, **kwargs}
        for k, v in self.params.items():
            setattr(self, k, v)

    @classmethod
    def version_matches(cls, env_id: str) -> bool:
        return env_id.split("/")[-1] == cls.gym_id

    @classmethod
    def default_obs_names(cls) -> list[str]:
        import mujoco

        task = cls()
        return task.obs_names(mujoco.MjModel.from_xml_path(gymnasium_asset(task.xml_file)))

    # --- formulas
    def before(self, s: State) -> Any:
        """Quantities read before the step (positions for the forward velocity)."""
        return None

    def reward(self, s: State, before: Any, action: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def obs(self, s: State) -> np.ndarray:
        raise NotImplementedError

    def obs_names(self, model: Any) -> list[str]:
        raise NotImplementedError

    def reset_state(
        self, rng: np.random.Generator, qpos0: np.ndarray, qvel0: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Initial state of one environment, drawing from its generator in Gymnasium's order."""
        scale = self.reset_noise_scale
        qpos = qpos0 + rng.uniform(low=-scale, high=scale, size=qpos0.size)
        qvel = qvel0 + rng.uniform(low=-scale, high=scale, size=qvel0.size)
        return qpos, qvel


def _normal_qvel_reset(
    task: Task, rng: np.random.Generator, qpos0: np.ndarray, qvel0: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    # HalfCheetah, Ant and InvertedDoublePendulum draw the velocity noise from a normal distribution
    scale = task.reset_noise_scale
    qpos = qpos0 + rng.uniform(low=-scale, high=scale, size=qpos0.size)
    qvel = qvel0 + scale * rng.standard_normal(qvel0.size)
    return qpos, qvel


class _Planar(Task):
    """Hopper, Walker2d, HalfCheetah, Swimmer: forward velocity of qpos[0], control cost, planar obs."""

    skip_qpos: ClassVar[int] = 1
    clip_qvel: ClassVar[bool] = False

    def before(self, s: State) -> np.ndarray:
        return s.qpos[:, 0].copy()

    def healthy(self, s: State) -> np.ndarray | None:
        return None

    def reward(
        self, s: State, before: np.ndarray, action: np.ndarray, dt: float
    ) -> tuple[np.ndarray, np.ndarray]:
        x_velocity = (s.qpos[:, 0] - before) / dt
        # ufunc reductions: np.sum/np.all's Python wrappers cost more than the math for small batches
        reward = self.forward_reward_weight * x_velocity - self.ctrl_cost_weight * np.add.reduce(
            np.square(action), 1
        )
        healthy = self.healthy(s)
        if healthy is None:
            return reward, np.zeros(len(reward), dtype=bool)
        reward = reward + healthy * self.healthy_reward
        terminated = ~healthy if self.terminate_when_unhealthy else np.zeros_like(healthy)
        return reward, terminated

    def _skip(self) -> int:
        return self.skip_qpos if self.exclude_current_positions_from_observation else 0

    def obs(self, s: State) -> np.ndarray:
        qvel = np.clip(s.qvel, -10, 10) if self.clip_qvel else s.qvel
        return np.concatenate([s.qpos[:, self._skip() :], qvel], axis=1)

    def obs_names(self, model: Any) -> list[str]:
        return qpos_names(model)[self._skip() :] + qvel_names(model)


_LOCO = {
    "forward_reward_weight": 1.0,
    "ctrl_cost_weight": 1e-3,
    "healthy_reward": 1.0,
    "terminate_when_unhealthy": True,
}


class Hopper(_Planar):
    name, gym_id, clip_qvel = "hopper", "Hopper-v5", True
    defaults: ClassVar[dict[str, Any]] = dict(
        xml_file="hopper.xml", frame_skip=4, **_LOCO, healthy_state_range=(-100.0, 100.0),
        healthy_z_range=(0.7, float("inf")), healthy_angle_range=(-0.2, 0.2), reset_noise_scale=5e-3,
        exclude_current_positions_from_observation=True,
    )  # fmt: skip

    def healthy(self, s: State) -> np.ndarray:
        z, angle = s.qpos[:, 1], s.qpos[:, 2]
        state = np.concatenate([s.qpos, s.qvel], axis=1)[:, 2:]
        lo, hi = self.healthy_state_range
        ok_state = np.logical_and.reduce((lo < state) & (state < hi), axis=1)
        ok_z = (self.healthy_z_range[0] < z) & (z < self.healthy_z_range[1])
        ok_angle = (self.healthy_angle_range[0] < angle) & (angle < self.healthy_angle_range[1])
        return ok_state & ok_z & ok_angle


class Walker2d(_Planar):
    name, gym_id, clip_qvel = "walker2d", "Walker2d-v5", True
    defaults: ClassVar[dict[str, Any]] = dict(
        xml_file="walker2d_v5.xml", frame_skip=4, **_LOCO, healthy_z_range=(0.8, 2.0),
        healthy_angle_range=(-1.0, 1.0), reset_noise_scale=5e-3,
        exclude_current_positions_from_observation=True,
    )  # fmt: skip

    def healthy(self, s: State) -> np.ndarray:
        z, angle = s.qpos[:, 1], s.qpos[:, 2]
        ok_z = (self.healthy_z_range[0] < z) & (z < self.healthy_z_range[1])
        ok_angle = (self.healthy_angle_range[0] < angle) & (angle < self.healthy_angle_range[1])
        return ok_z & ok_angle


class HalfCheetah(_Planar):
    name, gym_id = "halfcheetah", "HalfCheetah-v5"
    defaults: ClassVar[dict[str, Any]] = {
        "xml_file": "half_cheetah.xml", "frame_skip": 5, "forward_reward_weight": 1.0,
        "ctrl_cost_weight": 0.1, "reset_noise_scale": 0.1, "exclude_current_positions_from_observation": True,
    }  # fmt: skip
    reset_state = _normal_qvel_reset


class Swimmer(_Planar):
    name, gym_id, skip_qpos = "swimmer", "Swimmer-v5", 2
    defaults: ClassVar[dict[str, Any]] = {
        "xml_file": "swimmer.xml", "frame_skip": 4, "forward_reward_weight": 1.0, "ctrl_cost_weight": 1e-4,
        "reset_noise_scale": 0.1, "exclude_current_positions_from_observation": True,
    }  # fmt: skip


class Ant(Task):
    name, gym_id = "ant", "Ant-v5"
    defaults: ClassVar[dict[str, Any]] = {
        "xml_file": "ant.xml", "frame_skip": 5, "forward_reward_weight": 1.0, "ctrl_cost_weight": 0.5,
        "contact_cost_weight": 5e-4, "healthy_reward": 1.0, "main_body": 1, "terminate_when_unhealthy": True,
        "healthy_z_range": (0.2, 1.0), "contact_force_range": (-1.0, 1.0), "reset_noise_scale": 0.1,
        "exclude_current_positions_from_observation": True, "include_cfrc_ext_in_observation": True,
    }  # fmt: skip
    fields = ("xpos", "cfrc_ext")
    needs_rne_post = True
    reset_state = _normal_qvel_reset

    def _body(self, model: Any) -> int:
        return self.main_body if isinstance(self.main_body, int) else model.body(self.main_body).id

    def before(self, s: State) -> np.ndarray:
        return s.fields["xpos"][:, self._body(s.model), :2].copy()

    def _contact_forces(self, s: State) -> np.ndarray:
        cfrc = np.zeros_like(s.fields["cfrc_ext"]) if s.at_reset else s.fields["cfrc_ext"]
        return np.clip(cfrc, *self.contact_force_range)

    def reward(
        self, s: State, before: np.ndarray, action: np.ndarray, dt: float
    ) -> tuple[np.ndarray, np.ndarray]:
        x_velocity = (s.fields["xpos"][:, self._body(s.model), 0] - before[:, 0]) / dt
        state = np.concatenate([s.qpos, s.qvel], axis=1)
        z = state[:, 2]
        healthy = (
            np.isfinite(state).all(axis=1) & (self.healthy_z_range[0] <= z) & (z <= self.healthy_z_range[1])
        )
        ctrl_cost = self.ctrl_cost_weight * np.sum(np.square(action), 1)
        contact_cost = self.contact_cost_weight * np.sum(np.square(self._contact_forces(s)), axis=(1, 2))
        reward = (
            x_velocity * self.forward_reward_weight + healthy * self.healthy_reward - ctrl_cost - contact_cost
        )
        terminated = ~healthy if self.terminate_when_unhealthy else np.zeros_like(healthy)
        return reward, terminated

    def obs(self, s: State) -> np.ndarray:
        skip = 2 if self.exclude_current_positions_from_observation else 0
        parts = [s.qpos[:, skip:], s.qvel]
        if self.include_cfrc_ext_in_observation:
            parts.append(self._contact_forces(s)[:, 1:].reshape(len(s.qpos), -1))
        return np.concatenate(parts, axis=1)

    def obs_names(self, model: Any) -> list[str]:
        skip = 2 if self.exclude_current_positions_from_observation else 0
        names = qpos_names(model)[skip:] + qvel_names(model)
        if self.include_cfrc_ext_in_observation:
            names += body_names(model, "cfrc_ext", SPATIAL)
        return names


class Humanoid(Task):
    name, gym_id = "humanoid", "Humanoid-v5"
    defaults: ClassVar[dict[str, Any]] = {
        "xml_file": "humanoid.xml", "frame_skip": 5, "forward_reward_weight": 1.25, "ctrl_cost_weight": 0.1,
        "contact_cost_weight": 5e-7, "contact_cost_range": (-np.inf, 10.0), "healthy_reward": 5.0,
        "terminate_when_unhealthy": True, "healthy_z_range": (1.0, 2.0), "reset_noise_scale": 1e-2,
        "exclude_current_positions_from_observation": True, "include_cinert_in_observation": True,
        "include_cvel_in_observation": True, "include_qfrc_actuator_in_observation": True,
        "include_cfrc_ext_in_observation": True,
    }  # fmt: skip
    fields = ("xipos", "cinert", "cvel", "qfrc_actuator", "cfrc_ext")
    needs_rne_post = True

    def _mass_center(self, s: State) -> np.ndarray:
        mass = s.model.body_mass[None, :, None]
        return (np.sum(mass * s.fields["xipos"], axis=1) / np.sum(s.model.body_mass))[:, 0:2]

    def before(self, s: State) -> np.ndarray:
        return self._mass_center(s).copy()

    def _cfrc(self, s: State) -> np.ndarray:
        return np.zeros_like(s.fields["cfrc_ext"]) if s.at_reset else s.fields["cfrc_ext"]

    def reward(
        self, s: State, before: np.ndarray, action: np.ndarray, dt: float
    ) -> tuple[np.ndarray, np.ndarray]:
        x_velocity = (self._mass_center(s)[:, 0] - before[:, 0]) / dt
        z = s.qpos[:, 2]
        healthy = (self.healthy_z_range[0] < z) & (z < self.healthy_z_range[1])
        ctrl_cost = self.ctrl_cost_weight * np.sum(np.square(action), 1)  # Gymnasium uses data.ctrl = action
        contact_cost = np.clip(
            self.contact_cost_weight * np.sum(np.square(self._cfrc(s)), axis=(1, 2)), *self.contact_cost_range
        )
        reward = (
            self.forward_reward_weight * x_velocity + healthy * self.healthy_reward - ctrl_cost - contact_cost
        )
        terminated = ~healthy if self.terminate_when_unhealthy else np.zeros_like(healthy)
        return reward, terminated

    def obs(self, s: State) -> np.ndarray:
        n = len(s.qpos)
        skip = 2 if self.exclude_current_positions_from_observation else 0
        parts = [s.qpos[:, skip:], s.qvel]
        if self.include_cinert_in_observation:
            parts.append(s.fields["cinert"][:, 1:].reshape(n, -1))
        if self.include_cvel_in_observation:
            parts.append(s.fields["cvel"][:, 1:].reshape(n, -1))
        if self.include_qfrc_actuator_in_observation:
            parts.append(s.fields["qfrc_actuator"][:, 6:])
        if self.include_cfrc_ext_in_observation:
            parts.append(self._cfrc(s)[:, 1:].reshape(n, -1))
        return np.concatenate(parts, axis=1)

    def obs_names(self, model: Any) -> list[str]:
        skip = 2 if self.exclude_current_positions_from_observation else 0
        names = qpos_names(model)[skip:] + qvel_names(model)
        if self.include_cinert_in_observation:
            names += body_names(model, "cinert", tuple(str(k) for k in range(10)))
        if self.include_cvel_in_observation:
            names += body_names(model, "cvel", SPATIAL)
        if self.include_qfrc_actuator_in_observation:
            names += [f"qfrc_actuator_{n}" for n in qvel_names(model)[6:]]
        if self.include_cfrc_ext_in_observation:
            names += body_names(model, "cfrc_ext", SPATIAL)
        return names


class InvertedPendulum(Task):
    name, gym_id = "inverted_pendulum", "InvertedPendulum-v5"
    defaults: ClassVar[dict[str, Any]] = {
        "xml_file": "inverted_pendulum.xml",
        "frame_skip": 2,
        "reset_noise_scale": 0.01,
    }

    def reward(self, s: State, before: Any, action: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        obs = self.obs(s)
        terminated = ~np.isfinite(obs).all(axis=1) | (np.abs(obs[:, 1]) > 0.2)
        return (~terminated).astype(np.float64), terminated

    def obs(self, s: State) -> np.ndarray:
        return np.concatenate([s.qpos, s.qvel], axis=1)

    def obs_names(self, model: Any) -> list[str]:
        return qpos_names(model) + qvel_names(model)


class InvertedDoublePendulum(Task):
    name, gym_id = "inverted_double_pendulum", "InvertedDoublePendulum-v5"
    defaults: ClassVar[dict[str, Any]] = {
        "xml_file": "inverted_double_pendulum.xml",
        "frame_skip": 5,
        "healthy_reward": 10.0,
        "reset_noise_scale": 0.1,
    }
    fields = ("site_xpos", "qfrc_constraint")
    reset_state = _normal_qvel_reset

    def reward(self, s: State, before: Any, action: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        x, y = s.fields["site_xpos"][:, 0, 0], s.fields["site_xpos"][:, 0, 2]
        terminated = y <= 1
        v1, v2 = s.qvel[:, 1], s.qvel[:, 2]
        dist_penalty = 0.01 * x**2 + (y - 2) ** 2
        vel_penalty = 1e-3 * v1**2 + 5e-3 * v2**2
        return self.healthy_reward * ~terminated - dist_penalty - vel_penalty, terminated

    def obs(self, s: State) -> np.ndarray:
        return np.concatenate(
            [
                s.qpos[:, :1],
                np.sin(s.qpos[:, 1:]),
                np.cos(s.qpos[:, 1:]),
                np.clip(s.qvel, -10, 10),
                np.clip(s.fields["qfrc_constraint"], -10, 10)[:, :1],
            ],
            axis=1,
        )

    def obs_names(self, model: Any) -> list[str]:
        angles = qpos_names(model)[1:]
        return (
            qpos_names(model)[:1] + [f"sin_{a}" for a in angles] + [f"cos_{a}" for a in angles]
            + qvel_names(model) + [f"qfrc_constraint_{qvel_names(model)[0]}"]
        )  # fmt: skip


class Reacher(Task):
    name, gym_id = "reacher", "Reacher-v5"
    defaults: ClassVar[dict[str, Any]] = {
        "xml_file": "reacher.xml",
        "frame_skip": 2,
        "reward_dist_weight": 1.0,
        "reward_control_weight": 1.0,
    }
    fields = ("xpos",)

    def _vec(self, s: State) -> np.ndarray:
        m = s.model
        return s.fields["xpos"][:, m.body("fingertip").id] - s.fields["xpos"][:, m.body("target").id]

    def reward(self, s: State, before: Any, action: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        reward_dist = -np.linalg.norm(self._vec(s), axis=1) * self.reward_dist_weight
        reward_ctrl = -np.square(action).sum(1) * self.reward_control_weight
        return reward_dist + reward_ctrl, np.zeros(len(action), dtype=bool)

    def obs(self, s: State) -> np.ndarray:
        theta = s.qpos[:, :2]
        return np.concatenate(
            [np.cos(theta), np.sin(theta), s.qpos[:, 2:], s.qvel[:, :2], self._vec(s)[:, :2]], axis=1
        )

    def obs_names(self, model: Any) -> list[str]:
        qn = qpos_names(model)
        return (
            [f"cos_{n}" for n in qn[:2]] + [f"sin_{n}" for n in qn[:2]] + qn[2:] + qvel_names(model)[:2]
            + ["fingertip_to_target_x", "fingertip_to_target_y"]
        )  # fmt: skip

    def reset_state(
        self, rng: np.random.Generator, qpos0: np.ndarray, qvel0: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        qpos = rng.uniform(low=-0.1, high=0.1, size=qpos0.size) + qpos0
        while True:  # Gymnasium's rejection sampling of the goal, draw for draw
            goal = rng.uniform(low=-0.2, high=0.2, size=2)
            if np.linalg.norm(goal) < 0.2:
                break
        qpos[-2:] = goal
        qvel = qvel0 + rng.uniform(low=-0.005, high=0.005, size=qvel0.size)
        qvel[-2:] = 0
        return qpos, qvel


TASKS: dict[str, type[Task]] = {
    t.name: t
    for t in (
        Hopper,
        Walker2d,
        HalfCheetah,
        Swimmer,
        Ant,
        Humanoid,
        InvertedPendulum,
        InvertedDoublePendulum,
        Reacher,
    )
}


def gymnasium_id_to_task(env_id: str) -> str | None:
    """The native task of a Gymnasium id ("Hopper-v5" → "hopper"); None if it is not one (v5 only)."""
    for name, task in TASKS.items():
        if task.version_matches(env_id):
            return name
    return None
