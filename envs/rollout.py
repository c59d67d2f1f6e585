"""Evaluate a batch of policies: P individuals × E episodes each, stepped as one batch of P·E environments.

Environment ``p * E + e`` runs episode ``e`` of individual ``p``. Finished episodes are masked (their reward
is not counted, their length stops growing; stepping them further is harmless), and the loop stops early once
every episode has ended, checking that on the host at most every ``check_every`` steps, so the step loop
itself never waits for the device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .base import VecEnv

Policy = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class RolloutResult:
    mean_return: torch.Tensor  # [P] float64: mean over the individual's E episodes
    mean_length: torch.Tensor  # [P] float64: mean episode length in steps
    returns: torch.Tensor  # [P, E] float64 (accumulated in float64)
    lengths: torch.Tensor  # [P, E] int64
    steps: int  # batched steps taken (≤ max_steps; fewer when all episodes ended early)


@torch.no_grad()
def rollout(
    env: VecEnv,
    policy: Policy,
    num_individuals: int,
    episodes: int = 1,
    max_steps: int | None = None,
    check_every: int = 32,
    seed: int | None = None,
    common_starts: bool = False,
) -> RolloutResult:
    """Run ``episodes`` episodes per individual of a batched ``policy`` and return per-individual returns.

    Args:
        env: an environment with ``num_envs == num_individuals * episodes``.
        policy: ``obs [P, E, obs_dim] → action [P, E, act_dim]`` (``num_actions`` scores if discrete), torch
            tensors on ``env.device``; individual ``p`` must use only its own rows.
        num_individuals: P.
        episodes: E, episodes per individual (each from its own initial state).
        max_steps: T, at most this many steps (default ``env.episode_length``).
        check_every: look at the done flags on the host every this many steps (at least 1).
        seed: passed to ``env.reset`` (None: the environment's next seed).
        common_starts: every individual's episode ``e`` starts from ``seed + e`` (``env.reset(seed,
            starts=episodes)``: common random numbers), instead of environment ``i`` from ``seed + i``.
    """
    p, e = int(num_individuals), int(episodes)
    if p < 1 or e < 1:
        raise ValueError(f"num_individuals and episodes must be >= 1, got {num_individuals}, {episodes}")
    if env.num_envs != p * e:
        raise ValueError(
            f"env.num_envs ({env.num_envs}) must equal num_individuals * episodes ({p} * {e} = {p * e}); "
            f"make the environment with num_envs={p * e}"
        )
    if not isinstance(check_every, int) or check_every < 1:
        raise ValueError(f"check_every must be a positive int, got {check_every!r}")
    horizon = env.episode_length if max_steps is None else int(max_steps)
    if horizon < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    out_dim = env.num_actions if env.discrete else env.act_dim

    obs = env.reset(seed, starts=e) if common_starts else env.reset(seed)
    dev = env.device
    returns = torch.zeros(p * e, dtype=torch.float64, device=dev)
    lengths = torch.zeros(p * e, dtype=torch.int64, device=dev)
    alive = torch.ones(p * e, dtype=torch.bool, device=dev)
    steps = 0
    while steps < horizon:
        action = policy(obs.view(p, e, env.obs_dim))
        if not isinstance(action, torch.Tensor) or tuple(action.shape) != (p, e, out_dim):
            got = tuple(action.shape) if isinstance(action, torch.Tensor) else type(action).__name__
            raise ValueError(
                f"policy must return a tensor of shape [P, E, {out_dim}] = {(p, e, out_dim)}, got {got}"
            )
        obs, reward, terminated, truncated = env.step(action.reshape(p * e, out_dim))
        returns += torch.where(alive, reward.to(torch.float64), 0.0)
        lengths += alive.long()
        alive &= ~(terminated | truncated)
        steps += 1
        if steps % check_every == 0 and not bool(alive.any()):  # the only host sync of the loop
            break
    returns, lengths = returns.view(p, e), lengths.view(p, e)
    return RolloutResult(returns.mean(1), lengths.double().mean(1), returns, lengths, steps)
