"""Refinement of a tree policy by random search: a linear feedback term, or the tree's own constants.

``target: feedback`` (the default) gives the tree's outputs ``y(x)`` (``x`` the normalised observations) a
linear feedback term,

    y'(x) = y(x) + W x + b          (W, b: [n_out, n_in + 1], starting at 0);

``target: constants`` tunes the numbers the policy already holds: the tree's constants, each perturbed in
proportion to its size (``s = max(|c|, 0.1)``), and its observations' frozen normalisation ``(obs - m) / sd``
(a gain and an offset per observation, perturbed in units of ``sd``), so the formulas keep their shape and
length (the export folds the normalisation into them).

Both are tuned by Augmented Random Search (Mania et al. 2018, with its top-directions rule; the feedback
on the tree's frozen normalisation, ``s = 1``; on raw observations ``s = 1 / spread`` of each,
:func:`feedback_scale`): each iteration plays ``pairs`` antithetic perturbations
``θ ± sigma·s·δ``, ``episodes`` episodes each from fresh initial states, and steps along the ``top``
directions whose better member scored highest,

    θ ← θ + step / (top · σ_R) · Σ (r⁺ − r⁻) · s·δ          (σ_R: the std of those 2·top mean returns).

With ``prune = s`` the tuned feedback is cut afterwards, to each action's ``k`` heaviest weights for
every ``k`` of :data:`PRUNE_TERMS` below its count (:func:`pruned_feedback`); the cut policies are
validated beside the others and the shortest whose return is within the share ``s`` of the best is exported.

Evolution finds a gait's structure in few nodes; tuning its numbers on many initial states at once is what
makes it hold from all of them, which single-episode selection of trees rarely finds. :func:`fold` writes
the feedback as one tree (the tree's formulas plus the linear terms) and :func:`with_numbers` the tuned
numbers, so validation, export and replay treat the result like any other tree and its normalisation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from gprl.core.population import Population
from gprl.evolve.constants import constant_slots, with_values
from gprl.rl.policy import ActionMap

REFINE_KEYS = ("share", "iterations", "pairs", "top", "sigma", "step", "target", "episodes", "prune",
               "horizon")
TARGETS = ("feedback", "constants")
LOG_EVERY_S = 30.0  # a progress line at the first iteration, then at most one per this many seconds
PRUNE_TERMS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # weights per action the pruned feedbacks keep


@dataclass(frozen=True)
class RefineSettings:
    """``task.refine``: ``share`` of the search's time (the last share of ``gp.time_limit``; a search that
    generations or a target ended refines for ``share / (1 - share)`` of its evolution time), ``iterations``
    (a cap, or the budget without a share), ``pairs`` of perturbations per iteration (null: half the training
    batch, whose environments are then reused), the ``top`` pairs that step, ``sigma``, ``step``, the
    ``target`` tuned (``feedback`` or ``constants``), the ``episodes`` each perturbation plays (their mean
    scores it), ``prune`` (the share of the best validated return a shorter pruned feedback may give up;
    null: none) and ``horizon`` (steps of each perturbation's episodes; null: the full episode length):
    where a step is costly, shorter episodes buy more iterations."""

    share: float = 0.0
    iterations: int | None = None
    pairs: int | None = 16
    top: int | None = None  # null: every pair
    sigma: float = 0.03
    step: float = 0.02
    target: str = "feedback"
    episodes: int = 1
    prune: float | None = None
    horizon: int | None = None  # null: the full episode length

    @classmethod
    def from_config(cls, refine: dict[str, Any] | bool | None) -> RefineSettings | None:
        """None where refinement is off (``null``, ``false`` or ``{}``)."""
        if refine is None or refine is False or refine == {}:
            return None
        if not isinstance(refine, dict):
            raise TypeError(f"task.refine must be a mapping with keys {list(REFINE_KEYS)}, false or null, "
                             f"got {refine!r}")
        unknown = set(refine) - set(REFINE_KEYS)
        if unknown:
            raise ValueError(f"task.refine takes {list(REFINE_KEYS)}, got unknown {sorted(unknown)}")
        s = cls(**{k: v for k, v in refine.items() if v is not None or k in ("pairs", "top")})
        if not (isinstance(s.share, (int, float)) and 0 <= s.share < 1):
            raise ValueError(f"task.refine.share must be in [0, 1) (the share of the search's time given to "
                             f"refinement), got {s.share!r}")
        if s.target not in TARGETS:
            raise ValueError(f"task.refine.target must be one of {list(TARGETS)} (a linear feedback term, or "
                             f"the tree's own constants), got {s.target!r}")
        for name in ("iterations", "pairs", "top", "episodes", "horizon"):
            v = getattr(s, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"task.refine.{name} must be a positive integer or null, got {v!r}")
        for name in ("sigma", "step"):
            v = getattr(s, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
                raise ValueError(f"task.refine.{name} must be a positive number, got {v!r}")
        if s.pairs is not None and s.top is not None and s.top > s.pairs:
            raise ValueError(f"task.refine.top ({s.top}) must be at most task.refine.pairs ({s.pairs})")
        if s.prune is not None and s.target != "feedback":
            raise ValueError("task.refine.prune prunes feedback weights: it applies to target=feedback only")
        if s.prune is not None and (isinstance(s.prune, bool) or not isinstance(s.prune, (int, float))
                                    or not 0 <= s.prune < 1):
            raise ValueError(f"task.refine.prune must be a share in [0, 1) (of the best validated return "
                             f"that a shorter pruned feedback may give up) or null, got {s.prune!r}")
        if s.episodes > 1 and s.pairs is None:
            raise ValueError("task.refine.episodes > 1 needs task.refine.pairs (null pairs play the training "
                             "batch's environments, one episode each)")
        if not s.share and s.iterations is None:
            raise ValueError("task.refine needs a budget: share (of the search's time) or iterations")
        return s


@dataclass
class Refinement:
    params: torch.Tensor  # float64: the feedback's [n_out, n_in + 1] (W, then b), or tree_numbers' layout
    iterations: int
    seconds: float
    history: list[dict[str, float]]  # per iteration: mean score of the perturbations


def linear_policy(tree: Population, weights: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                  action_map: ActionMap) -> Callable[[torch.Tensor], torch.Tensor]:
    """The rollout policy of ``tree`` plus row ``k``'s linear term for environments ``[k, :]`` (``weights``
    [K, n_out, n_in + 1] on the environment's device; observations [K, E, n_in])."""
    n_in, n_out = tree.n_in, tree.n_out
    # laid out once: one batched matmul a step instead of an einsum over slices
    w_t, bias = weights[:, :, :n_in].transpose(1, 2).contiguous(), weights[:, None, :, n_in].contiguous()

    def policy(obs: torch.Tensor) -> torch.Tensor:
        x = (obs - mean) / std
        y = tree.forward(x.reshape(-1, n_in), check_finite=False).reshape(len(weights), -1, n_out)
        return action_map(torch.baddbmm(bias, x, w_t).add_(y))

    return policy


def constants_of(tree: Population) -> torch.Tensor:
    """The constants of one tree in prefix order, ``[C]`` float64."""
    pos, real = constant_slots(tree)
    return tree.value.gather(1, pos)[real].double()


def with_constants(tree: Population, values: torch.Tensor) -> Population:
    """``K`` copies of one tree, copy ``k`` holding ``values[k]`` (``[K, C]``, prefix order) as its
    constants."""
    pos, _ = constant_slots(tree)
    copies = tree[torch.zeros(len(values), dtype=torch.long, device=tree.device)]
    return with_values(copies, copies.value.scatter(1, pos.expand(len(values), -1), values.to(copies.value)))


def tree_numbers(tree: Population, mean: torch.Tensor, std: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``target: constants`` tunes, ``[C + 2·n_in]`` float64 on the CPU: one tree's constants (prefix
    order), then its normalisation's mean and std; and each number's perturbation scale."""
    c, mean, std = constants_of(tree).cpu(), mean.double().cpu(), std.double().cpu()
    return torch.cat([c, mean, std]), torch.cat([c.abs().clamp(min=0.1), std, std])


def with_numbers(tree: Population, numbers: torch.Tensor) -> tuple[Population, torch.Tensor, torch.Tensor]:
    """``K`` copies of one tree holding ``numbers[k]`` (``[K, C + 2·n_in]``, as :func:`tree_numbers`
    lays them out): the copies, and their normalisations' means and stds (``[K, n_in]``, stds above 0)."""
    n = tree.n_in
    C = numbers.shape[1] - 2 * n
    std = numbers[:, C + n:].abs().clamp(min=1e-6)
    return with_constants(tree, numbers[:, :C]), numbers[:, C:C + n], std


@torch.no_grad()
def refine(start: torch.Tensor, rows: int, settings: RefineSettings, seconds: float | None, seed: int,
           play: Callable[[torch.Tensor, int], torch.Tensor],
           agree: Callable[[bool], bool] = lambda go: go,
           log: Callable[[str], None] | None = None, scale: torch.Tensor | None = None) -> Refinement:
    """Tunes the parameters ``start`` (the feedback's ``[n_out, n_in + 1]`` zeros, or :func:`tree_numbers`)
    for ``seconds`` or ``settings.iterations``, whichever ends first, perturbing each by ``sigma·scale``
    (default 1). ``play(params, iteration)`` scores ``rows`` parameter sets (``[rows, *start.shape]`` float32
    on the CPU; ``2·pairs`` perturbations, then copies of the current set) and returns their fitness
    ``[rows]``; ``agree(go)`` makes every process take the same decision to go on (distributed runs: rank
    0's clock). The perturbations come from a generator seeded by ``seed``."""
    pairs = settings.pairs or rows // 2
    if not 1 <= 2 * pairs <= rows:
        raise ValueError(f"refinement needs 2 * pairs = {2 * pairs} environments, it has {rows}")
    top = min(settings.top or pairs, pairs)
    gen = torch.Generator().manual_seed(int(seed))
    w = start.double().clone()
    scale = torch.ones_like(w) if scale is None else scale.double()
    history: list[dict[str, float]] = []
    begin, it = time.perf_counter(), 0
    logged = -math.inf  # when the last progress line was written
    limit = settings.iterations or math.inf
    while agree(it < limit and (seconds is None or time.perf_counter() - begin < seconds)):
        delta = torch.randn(pairs, *w.shape, generator=gen, dtype=torch.float64) * scale
        cand = torch.cat([w + settings.sigma * delta, w - settings.sigma * delta,
                          w[None].expand(rows - 2 * pairs, *w.shape)]).float()
        r = torch.nan_to_num(play(cand, it).cpu().double(), nan=-math.inf)
        plus, minus = r[:pairs], r[pairs:2 * pairs]
        keep = torch.topk(torch.maximum(plus, minus), top).indices
        chosen = torch.cat([plus[keep], minus[keep]])
        sd = chosen.std() if top > 1 else (plus[keep] - minus[keep]).abs().mean()
        if torch.isfinite(chosen).all() and sd > 0:
            diff = (plus[keep] - minus[keep]).reshape(-1, *[1] * w.dim())
            w = w + settings.step / (top * sd) * (diff * delta[keep]).sum(0)
        it += 1
        history.append({"iteration": it, "mean_score": float(r[:2 * pairs].mean())})
        now = time.perf_counter()
        if log is not None and now - logged >= LOG_EVERY_S:  # long iterations (full episodes) stay visible
            logged = now
            log(f"refine: iteration {it}, perturbations' mean {history[-1]['mean_score']:.1f}, "
                f"{now - begin:.0f} s")
    return Refinement(w, it, time.perf_counter() - begin, history)


def heaviest(weights: torch.Tensor, scale: torch.Tensor | None, k: int) -> torch.Tensor:
    """The mask ``[n_out, n_in + 1]`` of each action's ``k`` heaviest feedback weights and its bias; a
    weight weighs ``|w| / scale`` (in units of its observation's spread where the observations are raw)."""
    n_in = weights.shape[-1] - 1
    size = weights[:, :n_in].abs() if scale is None else (weights[:, :n_in] / scale[..., :n_in]).abs()
    mask = torch.zeros_like(weights)
    mask[:, n_in] = 1.0
    return mask.scatter_(1, size.topk(min(k, n_in), dim=1).indices, 1.0)


def pruned_feedback(weights: torch.Tensor, scale: torch.Tensor | None = None
                    ) -> list[tuple[int, torch.Tensor]]:
    """``(k, weights cut to each action's k heaviest)`` for every ``k`` of :data:`PRUNE_TERMS` below the
    most weights an action holds, fewest first."""
    held = int(weights[:, :-1].count_nonzero(dim=1).max())
    return [(k, weights * heaviest(weights, scale, k)) for k in PRUNE_TERMS if k < held]


def feedback_scale(spread: torch.Tensor) -> torch.Tensor:
    """The feedback's perturbation scale ``[1, n_in + 1]`` for a tree on raw observations: each weight in
    units of ``1 / spread`` of its observation (what a unit weight on normalised observations is), the
    bias in 1."""
    return torch.cat([1.0 / spread.double().clamp(min=1e-6), torch.ones(1, dtype=torch.float64)])[None]


def fold(tree: Population, weights: torch.Tensor) -> Population:
    """One tree computing ``tree``'s outputs plus ``W x + b`` (``weights`` [n_out, n_in + 1]), built from
    the outputs' exact expressions; weights are rounded to float32, the constants the tree stores."""
    exprs = tree.to_sympy(0, protected=True)
    xs = [sympy.Symbol(f"x{i}", real=True) for i in range(tree.n_in)]
    w = weights.float().double().tolist()
    folded = [e + sum((sympy.Float(c) * x for c, x in zip(row[:-1], xs) if c != 0.0), sympy.Float(row[-1]))
              for e, row in zip(exprs, w)]
    return Population.from_expressions([folded], n_in=tree.n_in)
