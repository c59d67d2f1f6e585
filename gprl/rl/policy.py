"""Trees as control policies: observation normalisation, action mapping and batched policy evaluation.

A tree policy sees normalised observations ``x = (obs - mean) / std`` and its raw outputs ``y`` become
actions through an :class:`ActionMap`:

* ``tanh`` (continuous): ``a = center + half * tanh(y)`` with ``center = (low + high) / 2`` and
  ``half = (high - low) / 2``, so any output lands inside the bounds;
* ``clip`` (continuous): ``a = min(max(y, low), high)``;
* ``argmax`` (discrete): ``y`` are scores, the environment takes their argmax (with ``segments``, the argmax
  of each segment's consecutive scores: MultiDiscrete and MultiBinary actions).

The normaliser's statistics are **frozen within a generation** (every individual of a generation sees the same
mean/std, so their returns are comparable) and updated from that generation's observations afterwards.
``gprl.rl.export`` folds exactly these formulas into the exported expressions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from gprl.core.population import Population
from gprl.envs import VecEnv, rollout

ACTION_TRANSFORMS = ("tanh", "clip", "argmax", "none")


class ObsNormalizer:
    """Running mean/variance of observations (float64, Chan's parallel merge), applied as frozen float32.

    ``enabled=False`` is the identity (mean 0, std 1). ``std = sqrt(var + eps)`` so that constant
    observations do not divide by 0.
    """

    def __init__(self, dim: int, device: torch.device | str = "cpu", enabled: bool = True, eps: float = 1e-8):
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int (the observation size), got {dim!r}")
        self.dim, self.enabled, self.eps = dim, bool(enabled), float(eps)
        self.device = torch.device(device)
        self.count = torch.zeros((), dtype=torch.float64, device=self.device)
        self.mean64 = torch.zeros(dim, dtype=torch.float64, device=self.device)
        self.m2 = torch.zeros(dim, dtype=torch.float64, device=self.device)
        self.freeze()

    def freeze(self) -> None:
        """Fix the float32 mean/std that the policies of the next generation see."""
        if not self.enabled:
            self.mean = torch.zeros(self.dim, device=self.device)
            self.std = torch.ones(self.dim, device=self.device)
            return
        var = torch.where(self.count > 1, self.m2 / self.count.clamp(min=1), torch.ones_like(self.m2))
        self.mean = self.mean64.float()
        self.std = torch.sqrt(var + self.eps).float()

    def merge(self, count: torch.Tensor, total: torch.Tensor, total_sq: torch.Tensor) -> None:
        """Add a batch given by its count, sum and sum of squares (float64), without host syncs."""
        if not self.enabled:
            return
        n = count.to(torch.float64)
        safe = n.clamp(min=1)
        b_mean = total / safe
        b_m2 = (total_sq - total * b_mean).clamp(min=0)
        new = self.count + n
        delta = b_mean - self.mean64
        w = torch.where(new > 0, n / new.clamp(min=1), torch.zeros_like(n))
        self.mean64 = self.mean64 + delta * w
        self.m2 = self.m2 + b_m2 + delta.square() * self.count * w
        self.count = new

    def merge_envs(self, count: torch.Tensor, total: torch.Tensor, total_sq: torch.Tensor) -> None:
        """Add per-environment partial sums (``[N]``, ``[N, dim]``, ``[N, dim]``, float64), reduced over the
        environments in their order by :func:`gprl.train.distributed.ordered_sum`: the same bits whether the
        rows come from one process or are gathered from the shards of a distributed run."""
        from gprl.train.distributed import ordered_sum

        self.merge(ordered_sum(count), ordered_sum(total), ordered_sum(total_sq))

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs - self.mean) / self.std

    def state_dict(self) -> dict:
        return {"dim": self.dim, "enabled": self.enabled, "eps": self.eps, "count": self.count.cpu(),
                "mean64": self.mean64.cpu(), "m2": self.m2.cpu(), "mean": self.mean.cpu(),
                "std": self.std.cpu()}

    def load_state_dict(self, state: dict) -> None:
        if int(state["dim"]) != self.dim:
            raise ValueError(f"normaliser state has dim {state['dim']}, this normaliser {self.dim}")
        self.enabled, self.eps = bool(state["enabled"]), float(state["eps"])
        for k in ("count", "mean64", "m2", "mean", "std"):
            setattr(self, k, state[k].to(self.device))


@dataclass
class ActionMap:
    """Tree outputs → environment actions (see the module docstring)."""

    transform: str
    low: torch.Tensor | None = None
    high: torch.Tensor | None = None
    segments: tuple[int, ...] | None = None  # argmax: scores per discrete choice (None: one choice)

    def __post_init__(self):
        if self.transform not in ACTION_TRANSFORMS:
            raise ValueError(f"action transform must be one of {list(ACTION_TRANSFORMS)}, "
                             f"got {self.transform!r}")
        if self.transform in ("tanh", "clip") and (self.low is None or self.high is None):
            raise ValueError(f"action transform {self.transform!r} needs action bounds; use 'argmax' for a "
                             "discrete environment")

    @classmethod
    def for_env(cls, env: VecEnv, transform: str = "auto") -> ActionMap:
        if transform == "auto":
            transform = "argmax" if env.discrete else "tanh"
        if env.discrete and transform != "argmax":
            raise ValueError(f"env {env.name!r} is discrete: its action transform must be 'argmax', "
                             f"got {transform!r}")
        if not env.discrete and transform == "argmax":
            raise ValueError(f"env {env.name!r} is continuous: use action transform 'tanh' or 'clip', "
                             "not 'argmax'")
        segments = tuple(env.action_segments) if env.action_segments else None
        return cls(transform, env.action_low, env.action_high, segments)

    @property
    def n_out(self) -> int | None:
        return None if self.low is None else len(self.low)

    @cached_property
    def center_half(self) -> tuple[torch.Tensor, torch.Tensor]:  # once: the map runs at every step
        return (self.low + self.high) / 2, (self.high - self.low) / 2

    def __call__(self, y: torch.Tensor) -> torch.Tensor:
        if self.transform == "tanh":
            center, half = self.center_half
            # tanh in float64, rounded once: libraries' float32 tanh differ by an ulp, which chaotic dynamics
            # amplify; this makes the exported NumPy policy replay the training trajectories
            return center + half * torch.tanh(y.double()).float()
        if self.transform == "clip":
            return torch.minimum(torch.maximum(y, self.low), self.high)
        return y  # argmax/none: the environment maps scores / clips

    def unit(self, y: torch.Tensor) -> torch.Tensor:
        """Outputs ``[..., n_out]`` as actions in units of each one's half range about its centre (argmax:
        the one-hot choice; none: the outputs): where two policies' actions are compared."""
        if self.transform == "tanh":
            return torch.tanh(y)
        if self.transform == "clip":
            center, half = (t.to(y.device) for t in self.center_half)
            low, high = self.low.to(y.device), self.high.to(y.device)
            return (torch.minimum(torch.maximum(y, low), high) - center) / half
        if self.transform == "argmax":
            return torch.cat([torch.nn.functional.one_hot(s.argmax(-1), s.shape[-1]).to(y.dtype)
                              for s in y.split(list(self.segments or [y.shape[-1]]), dim=-1)], dim=-1)
        return y

    def state_dict(self) -> dict:
        return {"transform": self.transform, "low": None if self.low is None else self.low.cpu().tolist(),
                "high": None if self.high is None else self.high.cpu().tolist()}


@dataclass
class PolicyEvaluation:
    returns: torch.Tensor  # [P] float64 mean return over the episodes
    episode_returns: torch.Tensor  # [P, E]
    lengths: torch.Tensor  # [P] float64 mean episode length in steps
    env_steps: torch.Tensor  # scalar int64: live environment steps taken (on the device)
    batch_steps: int
    # with collect_stats: per environment, the live observations' count [N], sum and sum of squares
    # [N, obs_dim] (float64), for ObsNormalizer.merge_envs (kept per environment so that shards reduce in
    # global order)
    obs_stats: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None


@torch.no_grad()
def evaluate_policies(population: Population, env: VecEnv, action_map: ActionMap, mean: torch.Tensor,
                      std: torch.Tensor, episodes: int = 1, max_steps: int | None = None,
                      seed: int | None = None, stats: ObsNormalizer | None = None,
                      collect_stats: bool = False, common_starts: bool = False) -> PolicyEvaluation:
    """One batched rollout of ``len(population) * episodes`` environments (``common_starts``: every individual
    on the same ``episodes`` starts, see :func:`gprl.envs.rollout`).

    ``mean``/``std`` are ``[obs_dim]`` (shared) or ``[P, obs_dim]`` (per individual). With ``collect_stats``
    the observations of live episodes are summed per environment (``obs_stats``); ``stats`` also merges them
    into that normaliser after the rollout (not during: frozen statistics).
    """
    P = len(population)
    dev = env.device
    mean = mean.to(dev).reshape(-1, 1, env.obs_dim) if mean.dim() == 2 else mean.to(dev)
    std = std.to(dev).reshape(-1, 1, env.obs_dim) if std.dim() == 2 else std.to(dev)
    collect = collect_stats or stats is not None
    N = env.num_envs
    acc = (torch.zeros(N, dtype=torch.float64, device=dev),
           torch.zeros(N, env.obs_dim, dtype=torch.float64, device=dev),
           torch.zeros(N, env.obs_dim, dtype=torch.float64, device=dev))

    def policy(obs: torch.Tensor) -> torch.Tensor:
        if collect:
            live = ~env.done  # ended episodes' observations are not used (they may even be NaN)
            flat = torch.where(live[:, None], obs.reshape(-1, env.obs_dim).to(torch.float64), 0.0)
            acc[0].add_(live.to(torch.float64))
            acc[1].add_(flat)
            acc[2].add_(flat * flat)
        # no finiteness scan of the observations: it would wait for the GPU at every step
        return action_map(population.forward((obs - mean) / std, check_finite=False))

    res = rollout(env, policy, P, episodes, max_steps=max_steps, seed=seed, common_starts=common_starts)
    if stats is not None:
        stats.merge_envs(*acc)
    return PolicyEvaluation(res.mean_return, res.returns, res.mean_length, res.lengths.sum(), res.steps,
                            acc if collect else None)
