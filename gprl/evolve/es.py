"""An evolution strategy over the constants of the best trees, run inside the generations.

Every generation the ``centers`` best distinct trees that hold constants each get ``pairs`` antithetic
perturbations ``c ± s·δ`` of all their constants (``δ ~ N(0, 1)``, ``s = sigma·max(|c|, 0.1)``); they fill
the last rows of the next population. A generation later their losses give each center one step along
the estimated descent direction (the antithetic estimator of Salimans et al. 2017 and Mania et al. 2018):

    c' = c − step / (pairs·σ_L) · Σ_i (L⁺_i − L⁻_i) · s·δ_i          (σ_L: the std of the 2·pairs losses)

and the stepped tree joins the following population as one more child, selected like any other. Averaging
over many perturbations turns noisy returns into a usable direction where a mutation that happens to score
well on one episode often does not hold up.

The strategy keeps no state: a center and its offsets are read back from the population itself (a pair's
mean is the center, half its difference the offset), so checkpoints, resume and distributed runs need
nothing more. A group whose rows are not pairs of one structure (a population not made by ``step``) is
skipped.
"""

from __future__ import annotations

import math

import torch

from gprl.backend.ops import ops
from gprl.core.encoding import CONST, KIND_MASK
from gprl.core.population import Population

# odd 62-bit multipliers per node position for a structural hash of each tree (distinct centers)
_HASH_SEED = 0x2545F4914F6CDD1D


class ConstantES:
    """The strategy's arithmetic for one ``GeneticProgramming``; see the module docstring."""

    def __init__(self, centers: int, pairs: int, sigma: float, step: float, max_len: int, device):
        self.centers, self.pairs, self.sigma, self.step = int(centers), int(pairs), float(sigma), float(step)
        self.group = 2 * self.pairs + 1  # the stepped tree of the last generation's center, then the pairs
        self.rows = self.centers * self.group
        pos = torch.arange(max_len, dtype=torch.int64, device=device)
        self._weights = (pos * 2 + 1) * _HASH_SEED | 1

    def _hash(self, kind, code, out) -> torch.Tensor:
        """A hash of each tree's structure (constants aside: trees differing only there are one center)."""
        node = (kind.long() * 1_000_003 + code.long()) * 131 + out.long()
        return (node * self._weights).sum(1)

    def hide_pairs(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` with the pairs' rows at +inf (they stay out of selection and elitism)."""
        hidden = loss.clone()
        hidden[len(loss) - self.rows:].view(self.centers, self.group)[:, 1:] = math.inf
        return hidden

    def _centers(self, population: Population, loss: torch.Tensor) -> torch.Tensor:
        """Rows of the ``centers`` lowest-loss distinct trees with a constant (others fill in when too few
        qualify; their perturbations are copies, which a later step leaves unchanged)."""
        kind, code, out, _, _ = population.tensors()
        has_const = ((kind & KIND_MASK) == CONST).any(1)
        order = torch.argsort(torch.where(has_const, loss, math.inf), stable=True)
        h, by_hash = torch.sort(self._hash(kind[order], code[order], out[order]), stable=True)
        # within a run of equal hashes the stable sort keeps the lowest loss first: that tree is distinct
        first = torch.empty_like(h, dtype=torch.bool)
        first[by_hash] = torch.cat([h.new_ones(1, dtype=torch.bool), h[1:] != h[:-1]])
        picks = order[torch.argsort((~first).to(torch.int8), stable=True)]
        return picks[torch.arange(self.centers, device=loss.device) % len(picks)]

    def _stepped(self, population: Population, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(value [centers, L] of each stepped center, valid [centers]) from the pairs in ``population``'s
        last rows; a group is invalid where its rows are no pairs of one structure or give no step."""
        P, N = len(population), self.pairs
        kind, code, out, value, size = (t[P - self.rows:].view(self.centers, self.group, -1)[:, 1:]
                                        for t in population.tensors())
        same = [(t == t[:, :1]).flatten(1).all(1) for t in (kind, code, out, size)]
        plus, minus = value[:, :N], value[:, N:]
        center, offset = ((plus + minus) / 2).mean(1), (plus - minus) / 2
        lg = loss[P - self.rows:].view(self.centers, self.group)[:, 1:].double()
        finite = torch.isfinite(lg)
        worst = torch.where(finite, lg, -math.inf).amax(1, keepdim=True)
        lg = torch.where(finite, lg, worst)  # a pair member with no finite loss counts as the group's worst
        sd = lg.std(1, keepdim=True)
        weight = (lg[:, :N] - lg[:, N:]) / (N * sd)
        new = center - self.step * (weight[:, :, None] * offset.double()).sum(1).float()
        valid = torch.stack(same).all(0) & finite.any(1) & (sd[:, 0] > 0) & torch.isfinite(new).all(1)
        return new, valid

    def apply(self, population: Population, loss: torch.Tensor, ranked: torch.Tensor,
              children: tuple[torch.Tensor, ...], seed: int, read_pairs: bool) -> tuple[torch.Tensor, ...]:
        """``children`` (the next generation's five tensors) with their last ``rows`` rows replaced by, per
        group: the stepped tree of the pairs ``population`` holds (``read_pairs``), else a copy of the new
        center, then the new center's antithetic perturbations. Centers are chosen by ``ranked`` (the
        loss selection sees), steps taken on ``loss``."""
        picks = self._centers(population, ranked)
        kind, code, out, value, size = (t[picks] for t in population.tensors())
        is_const = (kind & KIND_MASK) == CONST
        u = ops.uniform(loss, 2 * self.centers * self.pairs * value.shape[1], seed).view(2, -1)
        # Box-Muller: counter-based normals, the same on the CPU and on CUDA
        delta = (torch.sqrt(-2 * torch.log1p(-u[0])) * torch.cos(2 * math.pi * u[1]))
        delta = delta.view(self.centers, self.pairs, -1)
        offset = self.sigma * value.abs().clamp_min(0.1)[:, None] * delta * is_const[:, None]
        rows = [value[:, None] + offset, value[:, None] - offset]
        if read_pairs:
            stepped, valid = self._stepped(population, loss)
            P = len(population)
            first = [t[P - self.rows + 1::self.group] for t in population.tensors()]  # a pair's structure
            head = [torch.where(valid[:, None], f, c) for f, c in zip(first, (kind, code, out, value, size))]
            head[3] = torch.where(valid[:, None], stepped, value)
        else:
            head = [kind, code, out, value, size]
        group = [torch.cat([h[:, None], t[:, None].expand(-1, 2 * self.pairs, -1)], 1)
                 for h, t in zip(head, (kind, code, out, value, size))]
        group[3] = torch.cat([head[3][:, None], *rows], 1)
        n = len(children[0])
        return tuple(torch.cat([c[: n - self.rows], g.reshape(self.rows, -1).to(c.dtype)])
                     for c, g in zip(children, group))
