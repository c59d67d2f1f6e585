"""Parent selection on the device: vectorised torch code, no loop over individuals, no host sync.

**Fitness convention.** Every function takes ``fitness`` [P] and a ``maximize`` flag: by default lower is
better (a loss, as ``Population.fitness`` returns); ``maximize=True`` for rewards. NaN and +-inf fitness
count as the worst possible value, so they are never selected as best (nor as elites).

Random draws come from ``gprl::uniform`` (Philox keyed by ``seed``), so a seed selects the same parents on
the CPU and on CUDA. Every function returns int64 indices [n] into the population.
"""

from __future__ import annotations

import torch

from gprl.backend.ops import ops
from gprl.core.seeds import seed_from

SELECTIONS = ("tournament", "truncation", "rank", "roulette", "lexicase")


def loss_of(fitness: torch.Tensor, maximize: bool = False) -> torch.Tensor:
    """Fitness as a float32 loss (lower is better), with NaN/inf mapped to +inf (the worst)."""
    if not isinstance(fitness, torch.Tensor) or fitness.dim() != 1 or not fitness.is_floating_point():
        raise ValueError("fitness must be a 1-D floating torch.Tensor [P]")
    loss = -fitness.float() if maximize else fitness.float()
    inf = float("inf")
    return loss.nan_to_num(nan=inf, posinf=inf, neginf=inf)  # one op (isfinite + where took seven)


def with_parsimony(loss: torch.Tensor, lengths: torch.Tensor, coefficient: float) -> torch.Tensor:
    """Parsimony pressure: loss + coefficient * tree length (a size penalty)."""
    if not coefficient >= 0:
        raise ValueError(f"parsimony coefficient must be >= 0, got {coefficient!r}")
    return loss + float(coefficient) * lengths.to(loss.dtype) if coefficient else loss


def _uniform(like: torch.Tensor, n: int, seed) -> torch.Tensor:
    return ops.uniform(like, n, seed_from(seed))


def _draw(u: torch.Tensor, m: int) -> torch.Tensor:
    """Uniform integers in [0, m) from uniforms in [0, 1)."""
    return (u.double() * m).long().clamp_(0, m - 1)


def _check_n(n: int, P: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if n and P == 0:
        raise ValueError("fitness is empty: cannot select from an empty population")


def elite(fitness: torch.Tensor, n: int, *, maximize: bool = False) -> torch.Tensor:
    """The n best individuals, best first (ties: lower index first)."""
    loss = loss_of(fitness, maximize)
    _check_n(n, len(loss))
    if n > len(loss):
        raise ValueError(f"n={n} elites requested from a population of {len(loss)}")
    return torch.argsort(loss, stable=True)[:n]


def tournament(fitness: torch.Tensor, n: int, size: int = 7, *, maximize: bool = False,
               seed=None) -> torch.Tensor:
    """n tournaments of ``size`` contestants drawn with replacement; the best wins (ties: first drawn)."""
    loss = loss_of(fitness, maximize)
    _check_n(n, len(loss))
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"tournament size must be an integer >= 1, got {size!r}")
    # one gprl::tournament launch: contestant j of tournament i is _draw(uniform i * size + j)
    return ops.tournament(loss.contiguous(), n, size, seed_from(seed))


def truncation(fitness: torch.Tensor, n: int, fraction: float = 0.5, *, maximize: bool = False,
               seed=None) -> torch.Tensor:
    """Uniform draws among the best ``fraction`` of the population (at least one individual)."""
    loss = loss_of(fitness, maximize)
    _check_n(n, len(loss))
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"truncation fraction must be in (0, 1], got {fraction!r}")
    m = max(1, round(fraction * len(loss)))
    best = torch.argsort(loss, stable=True)[:m]
    return best[_draw(_uniform(loss, n, seed), m)]


def _sample_weights(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Indices drawn with probability proportional to non-negative weights (uniform if all are 0)."""
    w = weights.double()
    total = w.sum()
    w = torch.where(total > 0, w, torch.ones_like(w))
    cdf = w.cumsum(0)
    idx = torch.searchsorted(cdf, u.double() * cdf[-1], right=True)
    return idx.clamp_(max=len(w) - 1)


def rank(fitness: torch.Tensor, n: int, pressure: float = 1.5, *, maximize: bool = False,
         seed=None) -> torch.Tensor:
    """Linear ranking: the best of P is drawn with probability pressure/P, the worst (2 - pressure)/P.

    Ranks come from the fitness order (ties: lower index ranks higher), never from the index."""
    loss = loss_of(fitness, maximize)
    P = len(loss)
    _check_n(n, P)
    if not 1.0 <= pressure <= 2.0:
        raise ValueError(f"rank pressure must be in [1, 2], got {pressure!r}")
    order = torch.argsort(loss, stable=True)
    r = torch.arange(P, device=loss.device, dtype=torch.float64)
    weights = pressure - (2 * pressure - 2) * r / max(P - 1, 1)
    return order[_sample_weights(weights, _uniform(loss, n, seed))]


def roulette(fitness: torch.Tensor, n: int, *, maximize: bool = False, seed=None) -> torch.Tensor:
    """Fitness-proportionate selection that works with any sign: the weights are the fitness shifted so
    the worst finite individual weighs 0 (all-equal fitness: uniform); NaN/inf weigh 0."""
    loss = loss_of(fitness, maximize)
    _check_n(n, len(loss))
    finite = torch.isfinite(loss)
    worst = torch.where(finite, loss, torch.full_like(loss, -float("inf"))).max()
    w = torch.where(finite, worst.double() - loss.double(), torch.zeros_like(loss, dtype=torch.float64))
    w = torch.where(w.sum() > 0, w, finite.double())  # all finite equal: uniform over the finite ones
    return _sample_weights(w, _uniform(loss, n, seed))


def mad_epsilon(errors: torch.Tensor) -> torch.Tensor:
    """Per-case epsilon of epsilon-lexicase: the median absolute deviation of the case's errors
    (La Cava et al. 2016), over finite errors."""
    e = torch.where(torch.isfinite(errors), errors, torch.full_like(errors, float("nan")))
    med = e.nanmedian(dim=0).values
    eps = (e - med).abs().nanmedian(dim=0).values
    return torch.nan_to_num(eps, nan=0.0)


def lexicase(errors: torch.Tensor, n: int, *, epsilon: str | float | None = "mad", seed=None,
             chunk_elements: int = 1 << 24) -> torch.Tensor:
    """Epsilon-lexicase selection on per-case errors [P, C] (lower is better; NaN/inf are the worst).

    Each selection shuffles the cases and keeps, case by case, the candidates within epsilon of the best
    remaining one; a random survivor is chosen. ``epsilon``: "mad" (per case, La Cava's rule), a number, or
    None/0 for plain lexicase. Cost O(n * P * C): vectorised over selections in chunks of
    ``chunk_elements`` candidate flags, looping over cases only.
    """
    if not isinstance(errors, torch.Tensor) or errors.dim() != 2 or not errors.is_floating_point():
        raise ValueError("errors must be a 2-D floating torch.Tensor [P, n_cases]")
    P, C = errors.shape
    _check_n(n, P)
    if C == 0:
        raise ValueError("errors must have at least one case (column)")
    e = errors.float()
    e = torch.where(torch.isfinite(e), e, torch.full_like(e, float("inf")))
    if epsilon == "mad":
        eps = mad_epsilon(errors.float())
    elif epsilon is None or (isinstance(epsilon, (int, float)) and epsilon >= 0):
        eps = torch.full((C,), float(epsilon or 0.0), device=e.device)
    else:
        raise ValueError(f"epsilon must be 'mad', a number >= 0 or None, got {epsilon!r}")
    s = seed_from(seed)
    u_cases = _uniform(e, n * C, s).view(n, C)
    u_pick = _uniform(e, n * P, s ^ 0x2545F4914F6CDD1D).view(n, P)
    case_order = u_cases.argsort(dim=1)  # a random permutation of the cases per selection
    et = e.t().contiguous()  # [C, P]
    out = []
    step = max(1, chunk_elements // max(P, 1))
    for start in range(0, n, step):
        order = case_order[start:start + step]
        alive = torch.ones(order.shape[0], P, dtype=torch.bool, device=e.device)
        for c in range(C):
            case = order[:, c]
            ec = et[case]  # [chunk, P]
            best = torch.where(alive, ec, torch.full_like(ec, float("inf"))).amin(dim=1, keepdim=True)
            alive &= ec <= best + eps[case][:, None]
        score = torch.where(alive, u_pick[start:start + step], torch.full_like(ec, -1.0))
        out.append(score.argmax(dim=1))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long, device=e.device)
