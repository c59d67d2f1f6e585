"""Users' own Gymnasium environments, defined here and reached only by their entry points
(``env=tests.envs.custom:PointMass``): the path a user's environment takes through ``train.py``."""

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PointMass(gym.Env):
    """A point on a plane pushed towards the origin: a Dict observation (position, velocity), a Box action;
    no time limit of its own. Reward: minus the distance to the origin."""

    observation_space = spaces.Dict({"position": spaces.Box(-10, 10, (2,), np.float64),
                                     "velocity": spaces.Box(-10, 10, (2,), np.float64)})
    action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-1, 1, 2)
        self.vel = np.zeros(2)
        return self._obs(), {}

    def _obs(self):
        return {"position": self.pos.copy(), "velocity": self.vel.copy()}

    def step(self, action):
        self.vel = np.clip(0.9 * self.vel + 0.1 * np.asarray(action, np.float64), -10, 10)
        self.pos = np.clip(self.pos + 0.1 * self.vel, -10, 10)
        return self._obs(), -float(np.linalg.norm(self.pos)), False, False, {}


class Switches(gym.Env):
    """Three switches to set to a target read in the observation: a MultiBinary observation (the target) and
    a MultiDiscrete action (each switch off, on or left as it was); 8 steps; reward +1 per switch right."""

    observation_space = spaces.Tuple((spaces.MultiBinary(3), spaces.Discrete(2)))
    action_space = spaces.MultiDiscrete([2, 2, 2])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = self.np_random.integers(0, 2, 3).astype(np.int8)
        self.t = 0
        return (self.target.copy(), int(self.t % 2)), {}

    def step(self, action):
        self.t += 1
        reward = float(np.sum(np.asarray(action) == self.target))
        return (self.target.copy(), int(self.t % 2)), reward, False, self.t >= 8, {}


class Faulty(PointMass):
    """PointMass whose simulator breaks on the third step: its error must reach the caller."""

    def step(self, action):
        self.t = getattr(self, "t", 0) + 1
        if self.t == 3:
            raise FloatingPointError("the simulation diverged")
        return super().step(action)
