"""The one protocol every environment backend implements.

An environment is a batch of ``num_envs`` independent episodes that are reset together and stepped together:

    obs = env.reset(seed)                                  # [N, obs_dim] float32 on env.device
    obs, reward, terminated, truncated = env.step(action)  # action [N, act_dim] on env.device

Episode bookkeeping is the same for every backend and lives here, so that evaluation code can rely on it:

* There is **no automatic reset**. An episode that has ended stays ended until the next ``reset()``: its
  ``terminated``/``truncated`` flags stay True and its reward is 0 on every later step. Its observation is
  whatever the simulator holds (it may keep being stepped, harmlessly); do not use it.
* ``truncated`` is the time limit (``episode_length`` steps after ``reset``) for episodes not already
  terminated.
* Actions are validated (a ``TypeError``/``ValueError`` that names ``action``), non-finite entries are
  replaced (NaN → 0, ±inf → the bound) and continuous actions are clipped to ``[action_low, action_high]``, so
  raw tree outputs are always safe. Discrete environments take the argmax over ``num_actions`` outputs (or
  integer indices of shape ``[N]``); with ``action_segments`` (MultiDiscrete, MultiBinary) an argmax over each
  segment's own outputs, ``[N, len(action_segments)]``.

Seeding follows Gymnasium's vector convention on every backend but Genesis: ``reset(seed)`` starts environment
``i`` from the seed ``seed + i``. So environments ``[a, b)`` of a batch are reproduced exactly by a batch of
``b - a`` environments reset with ``seed + a``: how a distributed run (:mod:`gprl.train.distributed`) gives
each process a shard of the batch without changing any episode. (Genesis draws the batch's noise from one
generator.) ``reset(seed, starts=k)`` starts environment ``i`` from ``seed + i % k`` instead: ``k`` initial
states repeated along the batch, so that individual ``p`` of a batch laid out as ``p * k + e`` meets the same
``k`` starts as every other (common random numbers; not on Genesis).

The tensors a step returns are the caller's: a later step never rewrites them.

The bookkeeping is a handful of element-wise torch ops on ``env.device`` (:func:`episode_rules`); nothing here
syncs with the host. A backend may override :meth:`VecEnv.step` with a fused version of it (NumPy for native
MuJoCo, inside the jitted step for Brax, in a CUDA graph with a step counter on the device for Genesis) that
keeps exactly these rules; its tests compare the two paths.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import torch
from typing_extensions import Self

StepResult = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def canonical_device(device: torch.device | str) -> torch.device:
    """The device as tensors on it report it: "cuda" -> "cuda:<current>" (the action checks compare devices).

    Unlike ``gprl.core.devices.canonical_device`` it allocates nothing, so a device no simulator supports
    still reaches the backend's own error message."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def episode_rules(
    terminated_before: torch.Tensor,
    truncated_before: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor | None,
    time_up: bool | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of the masking rules of the module docstring, as element-wise ops (no host sync).

    Takes the flags before the step, the simulator's reward and termination, its own time limit
    (``truncated``, None without one) and whether the episode length is reached (``time_up``: a bool, or a
    bool tensor when the step counter lives on the device); returns the masked reward and the flags after the
    step.
    """
    was_done = terminated_before | truncated_before
    reward = torch.where(was_done, 0.0, reward)
    terminated = terminated_before | (terminated & ~was_done)
    truncated = (truncated_before if truncated is None
                 else truncated_before | (truncated & ~was_done & ~terminated))
    if isinstance(time_up, torch.Tensor):
        truncated = truncated | (time_up & ~terminated)
    elif time_up:
        truncated = truncated | ~terminated
    return reward, terminated, truncated


class VecEnv(abc.ABC):
    """Base class of the batched environments (see the module docstring for the contract)."""

    #: backend name ("gymnasium", "mujoco", "brax", "genesis")
    backend: str = ""
    #: whether ``reset(seed, starts=k)`` can repeat starts along the batch (each environment seeded alone)
    common_starts: bool = True

    def __init__(
        self,
        *,
        name: str,
        num_envs: int,
        obs_dim: int,
        act_dim: int,
        device: torch.device,
        episode_length: int,
        seed: int,
        action_low: torch.Tensor | None = None,
        action_high: torch.Tensor | None = None,
        num_actions: int | None = None,
        obs_names: Sequence[str] | None = None,
        action_names: Sequence[str] | None = None,
        action_segments: Sequence[int] | None = None,
    ) -> None:
        self.name = name
        self.num_envs = int(num_envs)
        self.obs_dim = int(obs_dim)
        self.act_dim = int(act_dim)
        self.device = canonical_device(device)
        self.episode_length = int(episode_length)
        self.seed = int(seed)
        self.num_actions = num_actions
        self.discrete = num_actions is not None
        # several discrete choices, each an argmax over its own consecutive scores (None: one choice)
        self.action_segments = list(action_segments) if action_segments is not None else None
        if self.action_segments is not None and sum(self.action_segments) != num_actions:
            raise AssertionError(f"{name}: action_segments {self.action_segments} must add up to "
                                 f"num_actions={num_actions}")
        if self.discrete:
            self.action_low = self.action_high = None
        else:
            assert action_low is not None and action_high is not None
            self.action_low = action_low.to(self.device, torch.float32).reshape(self.act_dim)
            self.action_high = action_high.to(self.device, torch.float32).reshape(self.act_dim)
        self.obs_names = list(obs_names) if obs_names is not None else None
        self.action_names = list(action_names) if action_names is not None else None
        if self.obs_names is not None and len(self.obs_names) != self.obs_dim:
            raise AssertionError(f"{name}: {len(self.obs_names)} obs_names for obs_dim={self.obs_dim}")
        self._t = 0
        self._reset_called = False
        self._next_seed: int | None = self.seed
        self._terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._truncated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    # ------------------------------------------------------------------ public API
    @property
    def done(self) -> torch.Tensor:
        """[N] bool: the episode has ended (terminated or truncated) since the last reset."""
        return self._terminated | self._truncated

    @property
    def elapsed_steps(self) -> int:
        """Steps taken since the last reset (the same for every environment of the batch)."""
        return self._t

    def reset(self, seed: int | None = None, starts: int | None = None) -> torch.Tensor:
        """Start new episodes in every environment; returns the first observations [N, obs_dim].

        ``seed`` makes the initial states reproducible; ``None`` uses ``make(seed=...)`` on the first reset
        and continues the random stream afterwards (new, different episodes). ``starts=k`` (with a seed):
        environment ``i`` starts from ``seed + i % k`` (the module docstring's common starts).
        """
        if seed is not None and not isinstance(seed, int):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        if starts is not None and (isinstance(starts, bool) or not isinstance(starts, int) or starts < 1
                                   or seed is None):
            raise ValueError(f"starts must be a positive int given with a seed (environment i starts from "
                             f"seed + i % starts), got starts={starts!r}, seed={seed!r}")
        if starts is not None and not self.common_starts:
            raise ValueError(f"env.backend={self.backend} draws the batch's initial states from one "
                             "generator: it has no common starts (reset(seed, starts=...))")
        if seed is None:
            seed, self._next_seed = self._next_seed, None
        obs = self._reset(seed, starts)
        self._begin_episodes()
        return obs

    def step(self, action: torch.Tensor) -> StepResult:
        """Advance every environment by one step; see the module docstring for the masking rules."""
        self._check_reset_called()
        action = self.prepare_action(action)
        obs, reward, terminated, truncated = self._step(action)
        self._t += 1
        reward, self._terminated, self._truncated = episode_rules(
            self._terminated, self._truncated, reward, terminated, truncated, self._t >= self.episode_length
        )
        return obs, reward, self._terminated, self._truncated

    def _check_reset_called(self) -> None:
        if not self._reset_called:
            raise RuntimeError(f"{type(self).__name__}.step() called before reset()")

    def _begin_episodes(self) -> None:
        """Clear the episode bookkeeping (for backends that start episodes other than through reset())."""
        self._t = 0
        self._reset_called = True
        self._terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self._truncated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def observation_names(self) -> list[str] | None:
        """Names of the observation entries for a policy's formulas: ``obs_names``, or what a backend can read
        off its simulated model at the end of a run (Brax: :meth:`BraxEnv.observation_names`)."""
        return self.obs_names

    def close(self) -> None:
        """Release simulator resources (threads, worker processes)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = f"num_actions={self.num_actions}" if self.discrete else f"act_dim={self.act_dim}"
        return (
            f"{type(self).__name__}(name={self.name!r}, num_envs={self.num_envs}, obs_dim={self.obs_dim}, "
            f"{kind}, device={self.device}, episode_length={self.episode_length})"
        )

    # ------------------------------------------------------------------ actions
    def prepare_action(self, action: torch.Tensor) -> torch.Tensor:
        """Validate ``action`` and map it to what the simulator takes.

        Continuous: float [N, act_dim] → float32 [N, act_dim], finite and clipped to the bounds.
        Discrete: float [N, num_actions] → argmax, or integer [N] → as is; returns int64 [N] (with
        ``action_segments``: an argmax per segment, int64 [N, len(action_segments)]).
        """
        self._check_action_tensor(action)
        n = self.num_envs
        if self.discrete:
            k = len(self.action_segments) if self.action_segments else 1
            if not action.dtype.is_floating_point and action.dtype != torch.bool:
                if action.shape not in (((n,), (n, 1)) if k == 1 else ((n, k),)):
                    shape, per = ([n], "environment") if k == 1 else ([n, k], "environment and choice")
                    raise ValueError(f"integer action must have shape {shape} (one index per {per}), "
                                     f"got {tuple(action.shape)}")
                return action.reshape(n).long() if k == 1 else action.long()
            if not action.dtype.is_floating_point:
                raise TypeError(f"action must be floating point (scores per action), got {action.dtype}")
            if tuple(action.shape) != (n, self.num_actions):
                raise ValueError(
                    f"action must have shape [num_envs, num_actions] = [{n}, {self.num_actions}] "
                    f"(one score per discrete action; the env takes the argmax), got {tuple(action.shape)}"
                )
            # NaN scores must not win the argmax
            scores = torch.nan_to_num(action, nan=-torch.inf)
            if k == 1:
                return scores.argmax(dim=-1)
            return torch.stack([s.argmax(dim=-1) for s in scores.split(self.action_segments, dim=-1)], dim=-1)
        self._check_continuous_action(action)
        # NaN → 0 and ±inf → ±float32 max, which the clip then maps to the bounds
        action = torch.nan_to_num(action.to(torch.float32), nan=0.0)
        return torch.clamp(action, self.action_low, self.action_high).contiguous()

    def _check_action_tensor(self, action: torch.Tensor) -> None:
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"action must be a torch.Tensor on {self.device}, got {type(action).__name__}")
        if action.device != self.device:
            raise ValueError(
                f"action is on {action.device} but the environment is on {self.device}; "
                f"pass action.to(env.device)"
            )

    def _check_continuous_action(self, action: torch.Tensor) -> None:
        """The checks of :meth:`prepare_action` for a continuous action, without transforming it."""
        if not action.dtype.is_floating_point:
            raise TypeError(f"action must be a floating-point tensor (float32), got {action.dtype}")
        if tuple(action.shape) != (self.num_envs, self.act_dim):
            raise ValueError(
                f"action must have shape [num_envs, act_dim] = [{self.num_envs}, {self.act_dim}], "
                f"got {tuple(action.shape)}"
            )

    # ------------------------------------------------------------------ backend hooks
    def env_seeds(self, seed: int, starts: int | None = None) -> list[int]:
        """Each environment's seed for ``reset(seed, starts)``: ``seed + i``, or ``seed + i % starts``."""
        return [seed + (i % starts if starts else i) for i in range(self.num_envs)]

    @abc.abstractmethod
    def _reset(self, seed: int | None, starts: int | None = None) -> torch.Tensor:
        """Reset all environments (``seed`` None: continue the random stream; ``starts``: see :meth:`reset`);
        return obs [N, obs_dim]."""

    @abc.abstractmethod
    def _step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Step with a prepared action.

        Returns obs [N, obs_dim] f32, reward [N] f32, terminated [N] bool and the simulator's own truncation
        [N] bool (or None when the simulator has no time limit of its own).
        """
