"""The generation loop: selection, elitism and a configurable mix of variation operators on the device.

    gp = gprl.GeneticProgramming(n_in=1, pop_size=500, functions=["add", "sub", "mul", "div"], seed=0)
    pop = gp.init()
    for _ in range(50):
        pop = gp.step(pop, pop.fitness(X, y))
    best = gp.archive.best()

A step selects parents, copies ``elitism`` best trees bit-for-bit, picks an operator per child from
``rates`` and builds every child in one ``gprl::vary`` launch. It never walks trees in Python, never copies
trees to the host and has no host sync (so it queues asynchronously on CUDA), whatever the population size.
Fitness: lower is better unless ``maximize=True`` (see ``gprl.selection``); NaN/inf is the worst.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gprl.backend.ops import ops
from gprl.core.devices import canonical_device
from gprl.core.encoding import MAX_DEPTH_LIMIT, METHODS
from gprl.core.population import Population
from gprl.core.seeds import mix_seed, seed_from
from gprl.evolve import selection as S
from gprl.evolve.variation import OPS, VariationParams, weights_tensor

DEFAULT_RATES: dict[str, float] = {
    "crossover": 0.8, "subtree": 0.05, "point": 0.03, "multipoint": 0.01, "hoist": 0.02, "insert": 0.02,
    "delete": 0.02, "constant": 0.03, "multiconstant": 0.02,
}
class ParetoArchive:
    """Best loss per tree length (and that tree), kept on the device without host syncs.

    Losses are in the loss orientation (lower is better; ``-fitness`` when maximising). ``front()`` gives
    the non-dominated entries (no shorter tree is as good)."""

    def __init__(self, n_in: int, n_out: int, max_len: int, device):
        self.loss = torch.full((max_len + 1,), float("inf"), device=device)
        self.trees = Population.empty(n_in, n_out, max_len, device=device)._map(
            lambda t: t.new_zeros((max_len + 1, max_len)))

    def update(self, population: Population, loss: torch.Tensor) -> None:
        """For each tree length, the population's lowest finite loss (lowest index among equals) replaces the
        archived tree when strictly lower: one ``gprl::archive_update`` (new tensors; nothing is modified)."""
        if len(population) == 0:
            return
        *trees, self.loss = ops.archive_update(*self.trees.tensors(), self.loss, *population.tensors(),
                                               loss.float().contiguous())
        self.trees = Population(*trees, n_in=population.n_in, n_out=population.n_out)

    def front(self) -> tuple[torch.Tensor, torch.Tensor, Population]:
        """(lengths, losses, trees) of the Pareto front of length vs loss, shortest first (host sync)."""
        prev = torch.cat([self.loss.new_full((1,), float("inf")), self.loss.cummin(0).values[:-1]])
        keep = torch.nonzero(torch.isfinite(self.loss) & (self.loss < prev)).flatten()
        return keep, self.loss[keep], self.trees[keep]

    def best(self) -> tuple[float, Population]:
        """(loss, tree) of the lowest loss seen; the shortest tree among equals."""
        i = int(self.loss.argmin())
        return float(self.loss[i]), self.trees[i]


class GeneticProgramming:
    """Generational tree GP with a configurable operator mix; see the module docstring.

    ``rates`` maps ``gprl.variation.OPS`` names to the share of children made by that operator (floor or
    ceil of rate * children each generation, rate * children on average); they must sum to <= 1 and the rest
    of the children are plain copies (reproduction). ``selection`` is one
    of ``gprl.selection.SELECTIONS``; "lexicase" needs per-case ``errors`` in ``step``. ``parsimony`` adds
    ``parsimony * length`` to the loss seen by selection (not by elitism or the archive). ``max_depth``
    (<= 64, 0: none) and ``max_len`` bound every child; variation that would exceed them keeps the parent.
    ``islands`` > 1: an island model; the population is that many consecutive blocks that select only among
    themselves, each keeping its own ``elitism`` best trees, and every ``migration_interval`` generations the
    ``migrants`` best trees of each island are copied into the next island (a ring) in place of children.
    """

    def __init__(self, n_in: int, n_out: int = 1, *, pop_size: int = 1000, max_len: int = 64,
                 functions: Sequence[str] | dict[str, float] | None = None, init_method: str = "ramped",
                 init_depth: tuple[int, int] = (2, 6), max_depth: int = 17, selection: str = "tournament",
                 tournament_size: int = 7, truncation_fraction: float = 0.5, rank_pressure: float = 1.5,
                 lexicase_epsilon: str | float | None = "mad", elitism: int = 1, parsimony: float = 0.0,
                 maximize: bool = False, rates: dict[str, float] | None = None,
                 crossover_leaf_prob: float | None = 0.1, subtree_depth: int = 4, multi_prob: float = 0.1,
                 const_sigma: float = 0.1, const_prob: float = 0.2, const_range: tuple[float, float] = (-1.0, 1.0),
                 output_prob: float = 0.3, islands: int = 1, migration_interval: int = 10, migrants: int = 1,
                 seed: int | torch.Generator | None = 0, device=None):
        if isinstance(pop_size, bool) or not isinstance(pop_size, (int, np.integer)) or pop_size < 1:
            raise ValueError(f"pop_size must be an integer >= 1, got {pop_size!r}")
        if isinstance(tournament_size, bool) or not isinstance(tournament_size, (int, np.integer)) \
                or tournament_size < 1:
            raise ValueError(f"tournament_size must be an integer >= 1, got {tournament_size!r}")
        if selection not in S.SELECTIONS:
            raise ValueError(f"selection must be one of {list(S.SELECTIONS)}, got {selection!r}")
        if isinstance(elitism, bool) or not isinstance(elitism, (int, np.integer)) or not 0 <= elitism <= pop_size:
            raise ValueError(f"elitism must be an integer in 0..pop_size ({pop_size}), got {elitism!r}")
        for name, v in (("islands", islands), ("migration_interval", migration_interval), ("migrants", migrants)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < (0 if name == "migrants" else 1):
                raise ValueError(f"{name} must be an integer >= {0 if name == 'migrants' else 1}, got {v!r}")
        if pop_size % islands:
            raise ValueError(f"pop_size ({pop_size}) must be a multiple of islands ({islands})")
        if islands > 1 and elitism + migrants > pop_size // islands:
            raise ValueError(f"elitism + migrants ({elitism} + {migrants}) must fit an island of "
                             f"{pop_size // islands} trees; lower them or use fewer islands")
        if init_method not in METHODS:
            raise ValueError(f"init_method must be one of {list(METHODS)}, got {init_method!r}")
        if not (isinstance(init_depth, (tuple, list)) and len(init_depth) == 2 and 0 <= init_depth[0] <= init_depth[1]
                <= MAX_DEPTH_LIMIT):
            raise ValueError(f"init_depth must be (min, max) with 0 <= min <= max <= 64, got {init_depth!r}")
        if not (parsimony >= 0 and np.isfinite(parsimony)):
            raise ValueError(f"parsimony must be a finite number >= 0, got {parsimony!r}")
        rates = dict(DEFAULT_RATES if rates is None else rates)
        for name, r in rates.items():
            if name not in OPS or name == "exchange":
                raise ValueError(f"rates: unknown operator {name!r}; choose from {[o for o in OPS if o != 'exchange']}")
            if not (0.0 <= float(r) <= 1.0):
                raise ValueError(f"rates: rate of {name!r} must be in [0, 1], got {r!r}")
        if sum(rates.values()) > 1.0 + 1e-6:
            raise ValueError(f"rates must sum to <= 1 (the rest is reproduction), got {sum(rates.values()):.4f}")
        self.n_in, self.n_out, self.pop_size, self.max_len = n_in, n_out, int(pop_size), max_len
        self.functions, self.init_method, self.init_depth = functions, init_method, tuple(init_depth)
        self.selection, self.tournament_size = selection, int(tournament_size)
        self.truncation_fraction, self.rank_pressure = truncation_fraction, rank_pressure
        self.lexicase_epsilon, self.elitism, self.parsimony, self.maximize = lexicase_epsilon, int(elitism), \
            float(parsimony), bool(maximize)
        self.rates = rates
        self.islands, self.migration_interval = int(islands), int(migration_interval)
        self.migrants = int(migrants) if islands > 1 else 0
        self.params = VariationParams(functions=functions, max_depth=max_depth, subtree_depth=subtree_depth,
                                      crossover_leaf_prob=crossover_leaf_prob, multi_prob=multi_prob,
                                      const_sigma=const_sigma, const_prob=const_prob, const_range=tuple(const_range),
                                      output_prob=output_prob)
        self.device = canonical_device(device)
        self.seed = seed_from(seed)
        self.generation = 0
        self.archive = ParetoArchive(n_in, n_out, max_len, self.device)
        # operator per child (_operators): searchsorted of t / n plus a phase in the cumulative rates (tail: copy)
        names = [k for k, r in rates.items() if r > 0]
        self._op_codes = torch.tensor([OPS[k] for k in names] + [OPS["copy"]], dtype=torch.int32,
                                      device=self.device)
        self._op_cdf = torch.tensor(np.cumsum([rates[k] for k in names]), dtype=torch.float32,
                                    device=self.device)
        self._zeros = torch.zeros(self.pop_size, dtype=torch.int32, device=self.device)
        self._child_u: dict[int, torch.Tensor] = {}  # copies per island -> u of every child (_operators)
        p = self.params
        self._vary_args = (  # every argument of gprl::vary after the exchange points, but the seed
            weights_tensor(p, self.device), n_in, n_out, int(p.max_depth), int(p.subtree_depth),
            -1.0 if p.crossover_leaf_prob is None else float(p.crossover_leaf_prob), float(p.multi_prob),
            float(p.const_sigma), float(p.const_prob), *(float(c) for c in p.const_range), float(p.output_prob),
            p.grow_leaf_prob(n_in))

    def init(self) -> Population:
        """A random initial population (``init_method`` over depths ``init_depth``)."""
        lo, hi = self.params.const_range
        return Population.random(self.pop_size, self.n_in, self.n_out, max_len=self.max_len,
                                 functions=self.functions, method=self.init_method, min_depth=self.init_depth[0],
                                 max_depth=self.init_depth[1], const_prob=self.params.const_prob,
                                 const_range=(lo, hi), output_prob=self.params.output_prob,
                                 seed=mix_seed(self.seed, 0xA11CE), device=self.device)

    def _operators(self, generation: int, copies: int) -> torch.Tensor:
        """The operator of each child: copy for the first ``copies`` children of every island (elites and
        migrants), then systematic sampling of ``rates`` over the island's n others (child t takes the operator
        whose cumulative-rate interval holds (t + phase) / n, phase uniform in [0, 1) per generation), so every
        operator makes floor or ceil of rate * n children, rate * n on average. Parents are drawn per child
        independently of t, so grouping the children by operator costs no randomness; it makes neighbouring
        warps of the vary kernel run the same operator's code (mixed in random order the kernel ran 2.4x
        slower than any single operator: H100, P = 100,000)."""
        n = self.pop_size // self.islands - copies
        if copies not in self._child_u:  # copies get u = 2, past every rate
            one = torch.cat([torch.full((copies,), 2.0), torch.arange(n) / max(n, 1)])
            self._child_u[copies] = one.repeat(self.islands).to(device=self.device, dtype=torch.float32)
        phase = (mix_seed(self.seed, generation, 3) >> 9) / 2.0 ** 53  # _mix gives 62 bits: 53 of them
        u = self._child_u[copies] + phase / max(n, 1)
        return self._op_codes[torch.searchsorted(self._op_cdf, u, right=True)]

    def _select(self, loss: torch.Tensor, errors: torch.Tensor | None, n: int, seed: int) -> torch.Tensor:
        if self.selection == "tournament":  # the fused op on the already sanitised loss: one launch
            return ops.tournament(loss, n, self.tournament_size, seed)
        if self.selection == "truncation":
            return S.truncation(loss, n, self.truncation_fraction, seed=seed)
        if self.selection == "rank":
            return S.rank(loss, n, self.rank_pressure, seed=seed)
        if self.selection == "roulette":
            return S.roulette(loss, n, seed=seed)
        return S.lexicase(errors, n, epsilon=self.lexicase_epsilon, seed=seed)

    def step(self, population: Population, fitness: torch.Tensor, errors: torch.Tensor | None = None) -> Population:
        """The next generation (``pop_size`` trees) from ``population`` and its ``fitness`` [P].

        ``errors`` [P, n_cases] are per-case errors for lexicase selection (lower is better)."""
        if not isinstance(population, Population):
            raise TypeError(f"population must be a gprl.Population, got {type(population).__name__}")
        if (population.n_in, population.n_out, population.max_len) != (self.n_in, self.n_out, self.max_len):
            raise ValueError("population must have this GP's n_in, n_out and max_len")
        if population.device != self.device:
            raise ValueError(f"population is on {population.device}, the GP on {self.device}; move one of them")
        P = len(population)
        if P == 0:
            raise ValueError("population is empty; start from gp.init()")
        if not isinstance(fitness, torch.Tensor) or fitness.shape != (P,) or not fitness.is_floating_point() \
                or fitness.device != self.device:
            raise ValueError(f"fitness must be a floating tensor of shape [{P}] on {self.device}")
        if self.selection == "lexicase" and (not isinstance(errors, torch.Tensor) or errors.dim() != 2
                                             or errors.shape[0] != P):
            raise ValueError(f"lexicase selection needs errors [P={P}, n_cases] in step(population, fitness, errors)")
        if self.elitism > P:
            raise ValueError(f"elitism={self.elitism} exceeds the population size {P}")
        if self.islands > 1 and P != self.pop_size:
            raise ValueError(f"with islands the population must have pop_size ({self.pop_size}) trees, got {P}")
        g = self.generation
        loss = S.loss_of(fitness, self.maximize)
        sel_loss = S.with_parsimony(loss, population.lengths(), self.parsimony) if self.parsimony else loss
        I, e = self.islands, self.elitism
        m = self.migrants if g > 0 and g % self.migration_interval == 0 else 0
        S_in, S_out = P // I, self.pop_size // I  # trees per island, before and after
        n_kids = S_out - e - m
        # every island: its elites, the best `m` of the island before it (a ring), and children whose parent
        # and donor come from one selection call over the island
        if I == 1:  # no extra ops on the plain path: its host time before the vary launch is the step's latency
            best = torch.argsort(loss, stable=True)[None, :e]
        else:
            offsets = torch.arange(0, P, S_in, device=self.device)[:, None]
            best = torch.argsort(loss.view(I, S_in), dim=1, stable=True)[:, : max(e, m)] + offsets
        parents, donors = [], []
        for i in range(I):
            rows = slice(i * S_in, (i + 1) * S_in)
            seed = mix_seed(self.seed, g, 1) if i == 0 else mix_seed(self.seed, g, 1, i)
            picks = self._select(sel_loss[rows], None if errors is None else errors[rows], 2 * n_kids, seed)
            if I > 1:
                picks = picks + i * S_in
            kept = torch.cat([best[i, :e], best[i - 1, :m]]) if m else best[i, :e]  # best[-1]: the last island
            parents += [kept, picks[:n_kids]]
            donors += [kept, picks[n_kids:]]
        parent, donor = torch.cat(parents + donors).split(self.pop_size)
        zeros = self._zeros  # the exchange points (unused by these operators)
        tensors = ops.vary(*population.tensors(), *population.tensors(), parent, donor, self._operators(g, e + m),
                           zeros, zeros, *self._vary_args, mix_seed(self.seed, g, 4))
        # archived after the vary launch is queued: the GPU runs it while the host queues the archive's ops
        self.archive.update(population, loss)
        self.generation += 1
        return Population(*tensors, n_in=self.n_in, n_out=self.n_out)
