"""Native batched classic control: Gymnasium's CartPole, Pendulum, MountainCar, MountainCarContinuous and
Acrobot in NumPy, the whole batch at once, bit for bit Gymnasium's.

Each task restates its Gymnasium source (``gymnasium/envs/classic_control/``) operation for operation on
``[N]`` arrays of the dtypes Gymnasium's scalars have there (float64 state, float32 where Gymnasium keeps
float32: Acrobot's initial state, MountainCarContinuous' state after a step). NumPy 2 promotes an array
exactly as it promotes a NumPy scalar (a Python number takes the other operand's dtype), so every element
goes through the same IEEE operations in the same order. Where Gymnasium calls the C library on one scalar,
so does this module, element by element (:func:`_scalar_square`, :func:`_math`), since NumPy's array loops
may compute something else:

* ``x**2`` of a NumPy scalar is C's ``pow`` (``powf`` for float32), which differs from ``x*x`` (what
  ``array**2`` computes) in the last bit for about 0.1% of inputs; ``np.power`` with an array exponent runs
  SVML's ``pow`` on AVX-512 machines. Acrobot's dynamics grow such a bit into a different trajectory.
* MountainCar's ``math.cos`` and ``math.pow``.

NumPy's ``sin``/``cos`` on a scalar run the same loop as on an array, so those are vectorised.

Seeding: environment ``i`` draws its initial state from ``gymnasium.utils.seeding.np_random(seed + i)``
with Gymnasium's own call, as Gymnasium's vector env seeds its sub-environments; ``reset(None)`` continues
each environment's stream (as Gymnasium does where no autoreset drew from it in between).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from itertools import repeat
from typing import Any, ClassVar

import numpy as np
import torch

from ._deps import require
from .base import VecEnv
from .gymnasium_env import CLASSIC_OBS_NAMES

Step = tuple[np.ndarray, np.ndarray, np.ndarray]  # obs float32 [N, obs_dim], reward float64 [N], terminated


def _scalar_square(x: np.ndarray) -> np.ndarray:
    """``x**2`` of each element as a NumPy scalar of ``x``'s dtype, as Gymnasium squares its scalars."""
    return np.fromiter(map(operator.pow, x, repeat(2)), x.dtype, len(x))


def _math(fn: Callable[..., float], x: np.ndarray, *args: float) -> np.ndarray:
    """``math.<fn>`` of each element (``args`` after it), as float64."""
    return np.fromiter(map(fn, x.tolist(), *(repeat(a) for a in args)), np.float64, len(x))


class Task:
    """One classic-control task: its constants, Gymnasium's reset draw and its step on the whole batch."""

    gym_ids: ClassVar[tuple[str, ...]]
    #: key of ``CLASSIC_OBS_NAMES``
    family: ClassVar[str]
    #: Gymnasium's keyword arguments of the task and their defaults
    defaults: ClassVar[dict[str, Any]] = {}
    #: discrete: the number of actions; continuous (None): one action in [-action_bound, action_bound]
    num_actions: ClassVar[int | None] = None
    action_bound: ClassVar[float] = 0.0

    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(self.defaults)
        if unknown:
            raise TypeError(
                f"unknown keyword argument(s) {sorted(unknown)} for {', '.join(self.gym_ids)}; it takes "
                f"{sorted(self.defaults)} (as Gymnasium's)"
            )
        for k, v in {**self.defaults, **kwargs}.items():
            setattr(self, k, v)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """One environment's initial state, drawn as Gymnasium's ``reset`` draws it."""
        raise NotImplementedError

    def start(self, state: np.ndarray) -> np.ndarray:
        """Take the drawn states ``[N, state_dim]``; returns the first observations."""
        raise NotImplementedError

    def step(self, action: np.ndarray) -> Step:
        """Advance every environment: ``action`` int64 [N] (discrete) or float32 [N, 1] within the bounds."""
        raise NotImplementedError


class CartPole(Task):
    gym_ids, family, num_actions = ("CartPole-v0", "CartPole-v1"), "CartPole", 2
    defaults: ClassVar[dict[str, Any]] = {"sutton_barto_reward": False}
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(low=-0.05, high=0.05, size=(4,))

    def start(self, state: np.ndarray) -> np.ndarray:
        self.x, self.x_dot, self.theta, self.theta_dot = state.T
        return state.astype(np.float32)

    def step(self, action: np.ndarray) -> Step:
        x, x_dot, theta, theta_dot = self.x, self.x_dot, self.theta, self.theta_dot
        force = np.where(action == 1, self.force_mag, -self.force_mag)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        temp = (force + self.polemass_length * np.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x = x + self.tau * x_dot  # the "euler" kinematics integrator, Gymnasium's default
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        self.x, self.x_dot, self.theta, self.theta_dot = x, x_dot, theta, theta_dot
        terminated = ((x < -self.x_threshold) | (x > self.x_threshold)
                      | (theta < -self.theta_threshold_radians) | (theta > self.theta_threshold_radians))
        # the reward of the steps after the terminating one is masked (envs/base.py)
        if self.sutton_barto_reward:
            reward = np.where(terminated, -1.0, 0.0)
        else:
            reward = np.ones(len(x))
        return np.stack([x, x_dot, theta, theta_dot], axis=1).astype(np.float32), reward, terminated


class Pendulum(Task):
    gym_ids, family, action_bound = ("Pendulum-v1",), "Pendulum", 2.0
    defaults: ClassVar[dict[str, Any]] = {"g": 10.0}
    max_speed = 8
    max_torque = 2.0
    dt = 0.05
    m = 1.0
    l = 1.0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from gymnasium.envs.classic_control.pendulum import angle_normalize

        self.angle_normalize = angle_normalize

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        high = np.array([np.pi, 1.0])  # DEFAULT_X, DEFAULT_Y
        return rng.uniform(low=-high, high=high)

    def start(self, state: np.ndarray) -> np.ndarray:
        self.th, self.thdot = state.T
        return self._obs()

    def _obs(self) -> np.ndarray:
        return np.stack([np.cos(self.th), np.sin(self.th), self.thdot], axis=1).astype(np.float32)

    def step(self, action: np.ndarray) -> Step:
        th, thdot = self.th, self.thdot
        g, m, l, dt = self.g, self.m, self.l, self.dt
        u = np.clip(action[:, 0], -self.max_torque, self.max_torque)
        costs = (_scalar_square(self.angle_normalize(th)) + 0.1 * _scalar_square(thdot)
                 + 0.001 * _scalar_square(u))
        newthdot = thdot + (3 * g / (2 * l) * np.sin(th) + 3.0 / (m * l**2) * u) * dt
        newthdot = np.clip(newthdot, -self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        self.th, self.thdot = newth, newthdot
        return self._obs(), -costs, np.zeros(len(th), dtype=bool)


class MountainCar(Task):
    gym_ids, family, num_actions = ("MountainCar-v0",), "MountainCar", 3
    defaults: ClassVar[dict[str, Any]] = {"goal_velocity": 0}
    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.5
    force = 0.001
    gravity = 0.0025

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return np.array([rng.uniform(low=-0.6, high=-0.4), 0])

    def start(self, state: np.ndarray) -> np.ndarray:
        self.position, self.velocity = state.T
        return state.astype(np.float32)

    def step(self, action: np.ndarray) -> Step:
        position, velocity = self.position, self.velocity
        velocity = velocity + ((action - 1) * self.force + _math(math.cos, 3 * position) * (-self.gravity))
        velocity = np.clip(velocity, -self.max_speed, self.max_speed)
        position = position + velocity
        position = np.clip(position, self.min_position, self.max_position)
        velocity = np.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        self.position, self.velocity = position, velocity
        obs = np.stack([position, velocity], axis=1).astype(np.float32)
        return obs, np.full(len(position), -1.0), terminated


class MountainCarContinuous(Task):
    """Gymnasium keeps the state in float32 after the first step, and sets Python floats where it clamps;
    the comparisons with Python numbers are made as Gymnasium makes them."""

    gym_ids, family, action_bound = ("MountainCarContinuous-v0",), "MountainCarContinuous", 1.0
    defaults: ClassVar[dict[str, Any]] = {"goal_velocity": 0}
    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.45
    power = 0.0015

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return np.array([rng.uniform(low=-0.6, high=-0.4), 0])

    def start(self, state: np.ndarray) -> np.ndarray:
        self.position, self.velocity = state.T  # float64 until the first step
        return state.astype(np.float32)

    def step(self, action: np.ndarray) -> Step:
        position, velocity = self.position, self.velocity
        # min(max(action, min_action), max_action) returns the float32 action itself: it lies in the bounds
        force = action[:, 0]
        # float32 - Python float: the float is rounded to float32 first
        velocity = velocity + (force * self.power
                               - (0.0025 * _math(math.cos, 3 * position)).astype(np.float32))
        v_high = velocity > self.max_speed
        velocity = np.where(v_high, self.max_speed, velocity)
        v_low = velocity < -self.max_speed
        velocity = np.where(v_low, -self.max_speed, velocity)
        position = position + velocity
        p_high = position > self.max_position
        position = np.where(p_high, self.max_position, position)
        p_low = position < self.min_position
        position = np.where(p_low, self.min_position, position)
        at_wall = (p_low | (position == self.min_position)) & (velocity < 0)
        velocity = np.where(at_wall, 0.0, velocity)
        # where Gymnasium holds a Python number (a clamp, the wall's 0) it compares that, not our float32
        goal_v = self.goal_velocity
        v_ok = np.where(at_wall, 0 >= goal_v, np.where(v_high, self.max_speed >= goal_v,
                        np.where(v_low, -self.max_speed >= goal_v, velocity >= goal_v)))
        p_ok = np.where(p_high, self.max_position >= self.goal_position,
                        np.where(p_low, self.min_position >= self.goal_position,
                                 position >= self.goal_position))
        terminated = p_ok & v_ok
        reward = np.where(terminated, 100.0, 0.0) - _math(math.pow, force, 2) * 0.1
        self.position, self.velocity = position.astype(np.float32), velocity.astype(np.float32)
        return np.stack([self.position, self.velocity], axis=1), reward, terminated


class Acrobot(Task):
    """Gymnasium's defaults: the book's dynamics (``book_or_nips = "book"``), no torque noise
    (``torque_noise_max = 0``, so no draws after the reset)."""

    gym_ids, family, num_actions = ("Acrobot-v1",), "Acrobot", 3
    dt = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_MASS_1 = 1.0
    LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = 0.5
    LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1 = 4 * math.pi
    MAX_VEL_2 = 9 * math.pi
    # np.append(state, torque) makes the torque float64
    AVAIL_TORQUE = np.array([-1.0, 0.0, +1])

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(low=-0.1, high=0.1, size=(4,)).astype(np.float32)

    def start(self, state: np.ndarray) -> np.ndarray:
        # float32 until the first step, which appends the float64 torque
        self.s = [column.astype(np.float64) for column in state.T]
        return self._obs(list(state.T)).astype(np.float32)

    @staticmethod
    def _obs(s: list[np.ndarray]) -> np.ndarray:
        return np.stack([np.cos(s[0]), np.sin(s[0]), np.cos(s[1]), np.sin(s[1]), s[2], s[3]], axis=1)

    def _dsdt(self, s_augmented: list[np.ndarray]) -> list[Any]:
        m1 = self.LINK_MASS_1
        m2 = self.LINK_MASS_2
        l1 = self.LINK_LENGTH_1
        lc1 = self.LINK_COM_POS_1
        lc2 = self.LINK_COM_POS_2
        I1 = self.LINK_MOI
        I2 = self.LINK_MOI
        g = 9.8
        pi, cos, sin, sq = math.pi, np.cos, np.sin, _scalar_square
        theta1, theta2, dtheta1, dtheta2, a = s_augmented
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos(theta2)) + I2
        phi2 = m2 * lc2 * g * cos(theta1 + theta2 - pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * sq(dtheta2) * sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * cos(theta1 - pi / 2)
            + phi2
        )
        ddtheta2 = (
            a + d2 / d1 * phi1 - m2 * l1 * lc2 * sq(dtheta1) * sin(theta2) - phi2
        ) / (m2 * lc2**2 + I2 - sq(d2) / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return [dtheta1, dtheta2, ddtheta1, ddtheta2, 0.0]

    def _rk4(self, y0: list[np.ndarray]) -> list[np.ndarray]:
        """Gymnasium's ``rk4(self._dsdt, s_augmented, [0, self.dt])``, one array per state component."""
        t = [0, self.dt]
        dt = t[1] - t[0]
        dt2 = dt / 2.0
        k1 = self._dsdt(y0)
        k2 = self._dsdt([y + dt2 * k for y, k in zip(y0, k1, strict=True)])
        k3 = self._dsdt([y + dt2 * k for y, k in zip(y0, k2, strict=True)])
        k4 = self._dsdt([y + dt * k for y, k in zip(y0, k3, strict=True)])
        # the fifth component, the torque, is not needed further
        return [y + dt / 6.0 * (a + 2 * b + 2 * c + d) for y, a, b, c, d in zip(y0[:4], k1, k2, k3, k4)]

    @staticmethod
    def _wrap(x: np.ndarray, m: float, M: float) -> np.ndarray:
        diff = M - m
        while (over := x > M).any():
            x = np.where(over, x - diff, x)
        while (under := x < m).any():
            x = np.where(under, x + diff, x)
        return x

    def step(self, action: np.ndarray) -> Step:
        ns = self._rk4([*self.s, self.AVAIL_TORQUE[action]])
        pi = math.pi
        # bound(x, m, M) = min(max(x, m), M): the clip (no NaN reaches it)
        s = [self._wrap(ns[0], -pi, pi), self._wrap(ns[1], -pi, pi),
             np.clip(ns[2], -self.MAX_VEL_1, self.MAX_VEL_1), np.clip(ns[3], -self.MAX_VEL_2, self.MAX_VEL_2)]
        self.s = s
        terminated = -np.cos(s[0]) - np.cos(s[1] + s[0]) > 1.0
        return self._obs(s).astype(np.float32), np.where(terminated, 0.0, -1.0), terminated


TASKS: dict[str, type[Task]] = {
    gym_id: cls for cls in (CartPole, Pendulum, MountainCar, MountainCarContinuous, Acrobot)
    for gym_id in cls.gym_ids
}


class ClassicEnv(VecEnv):
    """Gymnasium's classic-control tasks (:data:`TASKS`, by Gymnasium id), batched in NumPy on the CPU."""

    backend = "classic"

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str | None = None,
        seed: int = 0,
        episode_length: int | None = None,
        **task_kwargs: Any,
    ) -> None:
        gym = require("gymnasium", "gymnasium")
        if env_id not in TASKS:
            raise ValueError(f"unknown classic-control task {env_id!r}; choose one of {sorted(TASKS)}")
        self.task = TASKS[env_id](**task_kwargs)
        if episode_length is None:
            episode_length = gym.spec(env_id).max_episode_steps
        bound = self.task.action_bound
        actions: dict[str, Any] = (
            {"act_dim": self.task.num_actions, "num_actions": self.task.num_actions}
            if self.task.num_actions else
            {"act_dim": 1, "action_low": torch.tensor([-bound]), "action_high": torch.tensor([bound])}
        )  # fmt: skip
        names = CLASSIC_OBS_NAMES[self.task.family]
        super().__init__(
            name=env_id,
            num_envs=num_envs,
            obs_dim=len(names),
            device=torch.device(device) if device is not None else torch.device("cpu"),
            episode_length=episode_length,
            seed=seed,
            obs_names=names,
            **actions,
        )
        self._rngs: list[np.random.Generator] = []

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(x).to(self.device)

    def _reset(self, seed: int | None, starts: int | None = None) -> torch.Tensor:
        if seed is not None:
            from gymnasium.utils.seeding import np_random

            self._rngs = [np_random(s)[0] for s in self.env_seeds(seed, starts)]
        return self._tensor(self.task.start(np.stack([self.task.draw(rng) for rng in self._rngs])))

    def _step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        obs, reward, terminated = self.task.step(action.cpu().numpy())
        return self._tensor(obs), self._tensor(reward.astype(np.float32)), self._tensor(terminated), None
