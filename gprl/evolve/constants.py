"""Local optimisation of the constants of a few trees: Levenberg–Marquardt steps on the objective's loss.

GP moves constants only by random mutation; fitting them by a few damped Gauss–Newton steps, as Operon and
PySR do for selected individuals, turns a tree of the right shape into its best-fitting instance.

    tuned, loss = gprl.evolve.constants.optimize_constants(population[best], objective, iterations=8)

For ``k`` trees with at most ``C`` constants each:

* the Jacobian of every output on every training row with respect to every constant is taken by central
  finite differences through the forward kernel: ``2C + 1`` copies of each tree in one launch. The kernel's
  own float32 semantics (protected division, saturation, ...) are differentiated, so no second evaluator has
  to be kept in step with ``kernels/nodes.h``;
* the objective supplies the loss and its first and second derivatives with respect to the outputs
  (``objective.gauss_newton_terms``); the Gauss–Newton matrix ``J^T H J`` plus Marquardt's damping
  ``lambda * diag`` gives a step per tree;
* a step is kept only where the objective's own loss decreases (the damping then shrinks, else grows), so the
  loss of every tree never increases.

Everything is tensor algebra over the ``k`` trees at once on their device; the one host sync per call reads
``C`` (the padded number of constants).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from gprl.core.population import CONST, KIND_MASK, Population

_H_REL = 1e-3     # finite-difference step, relative to max(1, |constant|)
_LAMBDA0 = 1e-3   # Marquardt damping at the start, and its bounds
# dampings tried per step, x lambda
_LAMBDA_TRIES = torch.tensor([0.1, 1.0, 10.0, 100.0], dtype=torch.float64)
_LAMBDA_MIN, _LAMBDA_MAX = 1e-9, 1e9
_MAX_CONST = 1e30  # constants stay finite in float32 (the tree validator's rule) with room to spare


def constant_slots(trees: Population) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``[k, C]`` of every tree's constants in prefix order, and which slots are real ``[k, C]``
    (``C`` = the most constants of any tree; one host sync)."""
    is_const = (trees.kind & KIND_MASK) == CONST
    C = int(is_const.sum(1).max()) if len(trees) else 0
    # a stable sort puts the constant positions first, in prefix order; the rest are distinct filler slots
    order = torch.argsort((~is_const).to(torch.uint8), dim=1, stable=True)[:, :C]
    return order, is_const.gather(1, order)


def optimize_constants(trees: Population, objective, iterations: int = 8,
                       loss: torch.Tensor | None = None) -> tuple[Population, torch.Tensor]:
    """The ``trees`` with constants tuned by ``iterations`` Levenberg–Marquardt steps, and their losses
    ``[k]``.

    ``objective`` is called as ``objective(population) -> loss [P]`` and must provide
    ``gauss_newton_terms(outputs [k, D, M]) -> (grad [k, D, M], hess [k, D, M, M])``: the loss's gradient
    and (Gauss–Newton) Hessian with respect to every tree's outputs row by row
    (:class:`gprl.ClassificationObjective` does). ``loss``: the trees' current losses, when known.
    Trees without constants come back unchanged; no tree's loss increases.
    """
    if not isinstance(trees, Population):
        raise TypeError(f"trees must be a gprl.Population, got {type(trees).__name__}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be an integer >= 0, got {iterations!r}")
    current = objective(trees) if loss is None else loss.to(torch.float32)
    k = len(trees)
    pos, real = constant_slots(trees)
    C = pos.shape[1]
    if k == 0 or C == 0 or iterations == 0:
        return trees, current
    dev = trees.device
    lam = torch.full((k,), _LAMBDA0, dtype=torch.float64, device=dev)
    n_copies = 2 * C + 1
    copies = trees._map(lambda t: t.repeat_interleave(n_copies, 0))  # the structure; values change per step
    T = len(_LAMBDA_TRIES)
    trials = trees._map(lambda t: t.repeat_interleave(T, 0))
    eye = torch.eye(C, dtype=torch.float64, device=dev)
    tries, rows = _LAMBDA_TRIES.to(dev), torch.arange(k, device=dev)
    X = objective.data.X
    for _ in range(iterations):
        base = trees.value.gather(1, pos)  # float32, as the kernels see them
        h32 = ((base + _H_REL * base.abs().clamp(min=1.0)) - base) * real  # the float32 step actually taken
        bump = torch.zeros(k, C, trees.max_len, device=dev).scatter_(2, pos[:, :, None], h32[:, :, None])
        values = torch.cat([trees.value[:, None], trees.value[:, None] + bump, trees.value[:, None] - bump],
                           1)
        # X is the objective's Dataset, checked once: no finiteness scan (a GPU sync) per step
        out = with_values(copies, values.reshape(k * n_copies, -1)).forward(X, check_finite=False)
        out = out.view(k, n_copies, X.shape[0], -1).double()  # [k, 2C + 1, D, M]
        h = torch.where(real, 2.0 * h32.double(), 1.0)
        J = torch.nan_to_num((out[:, 1:C + 1] - out[:, C + 1:]) / h[:, :, None, None], nan=0.0, posinf=0.0,
                             neginf=0.0)  # [k, C, D, M]
        g_out, h_out = objective.gauss_newton_terms(out[:, 0])
        g = torch.einsum("kcdm,kdm->kc", J, g_out)
        HJ = torch.einsum("kdmn,kedn->kdme", h_out, J)  # [k, D, M, C]
        H = torch.einsum("kcdm,kdme->kce", J, HJ)
        diag = H.diagonal(dim1=1, dim2=2)
        # Marquardt's scaling, plus a floor so constants without effect (or fillers) get a zero step; several
        # dampings are tried at once (one batched solve, one launch) and the best trial is kept
        floor = 1e-12 * (1.0 + diag.amax(1, keepdim=True))
        lams = lam[:, None] * tries  # [k, T]
        A = H[:, None] + torch.diag_embed(lams[..., None] * diag[:, None] + floor[:, None]) \
            + eye * (~real)[:, None, None, :]
        step = torch.linalg.solve_ex(A, -g[:, None, :, None].expand(-1, T, -1, -1),
                                     check_errors=False)[0][..., 0]  # [k, T, C]
        cand = base.double()[:, None] + torch.nan_to_num(step, nan=0.0, posinf=0.0, neginf=0.0)
        ok = (cand.abs() < _MAX_CONST).all(-1)  # [k, T]
        cand = torch.where(ok[..., None] & real[:, None], cand, base.double()[:, None]).float()
        trial_values = trees.value[:, None].expand(-1, T, -1).scatter(2, pos[:, None].expand(-1, T, -1), cand)
        trial_loss = objective(with_values(trials, trial_values.reshape(k * T, -1))).view(k, T)
        trial_loss = torch.where(ok & torch.isfinite(trial_loss), trial_loss, float("inf"))
        best_loss, j = trial_loss.min(1)
        better = best_loss < current
        current = torch.where(better, best_loss, current)
        chosen = trial_values[rows, j]
        trees = with_values(trees, torch.where(better[:, None], chosen, trees.value))
        # next time centre the tries on the damping that won; after a miss, try far stronger ones
        lam = torch.where(better, lams[rows, j], lam * tries[-1] * 10.0).clamp(_LAMBDA_MIN, _LAMBDA_MAX)
    return trees, current


def with_values(trees: Population, values: torch.Tensor) -> Population:
    """``trees`` with every node value replaced by ``values`` ``[P, max_len]`` (the structure shared)."""
    return Population(trees.kind, trees.code, trees.out, values.contiguous(), trees.size, n_in=trees.n_in,
                      n_out=trees.n_out)


def best_distinct(loss: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of up to ``k`` trees with the lowest finite losses, one per distinct loss value (copies of
    one tree share a loss; tuning them all would waste the budget). One host sync."""
    order = torch.argsort(loss, stable=True)
    s = loss[order]
    first = torch.ones_like(s, dtype=torch.bool)
    first[1:] = s[1:] != s[:-1]
    return order[torch.nonzero(first & torch.isfinite(s)).flatten()[:k]]


def tune_best(population: Population, loss: torch.Tensor, objective, k: int,
              iterations: int) -> tuple[Population, torch.Tensor]:
    """``population`` and ``loss [P]`` with the constants of its ``k`` best distinct trees tuned by
    :func:`optimize_constants` (written back in place of those trees)."""
    idx = best_distinct(loss, k)
    if len(idx) == 0:
        return population, loss
    tuned, tuned_loss = optimize_constants(population[idx], objective, iterations, loss=loss[idx])
    values = population.value.index_copy(0, idx, tuned.value)
    return with_values(population, values), loss.index_copy(0, idx, tuned_loss.to(loss.dtype))


@dataclass(frozen=True)
class ConstantFitting:
    """Constant fitting as a step of the generation loop (:class:`gprl.evolve.loop.Evolution`): every
    ``every`` generations the constants of the ``trees`` best distinct trees of each population are fitted by
    ``iterations`` Levenberg–Marquardt steps on ``objective`` (:func:`tune_best`). The population's fitness
    must be that objective's loss."""

    objective: Callable[[Population], torch.Tensor]
    trees: int
    iterations: int = 8
    every: int = 1

    def due(self, generation: int) -> bool:
        return self.trees > 0 and generation % self.every == 0

    def __call__(self, population: Population, loss: torch.Tensor) -> tuple[Population, torch.Tensor]:
        return tune_best(population, loss, self.objective, self.trees, self.iterations)
