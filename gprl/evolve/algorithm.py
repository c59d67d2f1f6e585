"""One generation step: selection, elitism and a configurable mix of variation operators on the device.

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

import numpy as np
import torch

from gprl.backend.ops import ops
from gprl.core.devices import canonical_device
from gprl.core.population import Population
from gprl.core.seeds import mix_seed, seed_from
from gprl.evolve import selection as S
from gprl.evolve.config import DEFAULT_RATES, GPConfig  # noqa: F401 - DEFAULT_RATES: public here too
from gprl.evolve.es import ConstantES
from gprl.evolve.variation import OPS, VariationParams, weights_tensor


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
    ``es_share`` > 0 gives the last rows of every generation to an evolution strategy over the constants of
    the best trees (``gprl.evolve.es``); ``init_every_output`` makes every initial tree write every output.
    """

    def __init__(self, n_in: int, n_out: int = 1, config: GPConfig | None = None, *,
                 seed: int | torch.Generator | None = 0, device=None, **settings):
        if "pop_size" in settings:  # the short name of population_size
            settings["population_size"] = settings.pop("pop_size")
        if config is None:
            config = GPConfig(**settings)
        elif settings:
            config = config.replace(**settings)
        self.config = c = config
        self.n_in, self.n_out, self.pop_size, self.max_len = n_in, n_out, c.population_size, c.max_len
        self.functions, self.init_method, self.init_depth = c.functions, c.init_method, c.init_depth
        self.selection, self.tournament_size = c.selection, c.tournament_size
        self.truncation_fraction, self.rank_pressure = c.truncation_fraction, c.rank_pressure
        self.lexicase_epsilon, self.elitism, self.parsimony, self.maximize = c.lexicase_epsilon, \
            int(c.elitism), float(c.parsimony), bool(c.maximize)
        self.rates = rates = c.rates
        self.islands, self.migration_interval = c.islands, c.migration_interval
        self.migrants = c.migrants if c.islands > 1 else 0
        self.params = VariationParams(functions=c.functions, max_depth=c.max_depth,
                                      subtree_depth=c.subtree_depth,
                                      crossover_leaf_prob=c.crossover_leaf_prob, multi_prob=c.multi_prob,
                                      const_sigma=c.const_sigma, const_prob=c.const_prob,
                                      const_range=c.const_range, output_prob=c.output_prob)
        self.device = canonical_device(device)
        self.seed = seed_from(seed)
        self.generation = 0
        self.fresh_at = 0  # the generation whose population is a fresh random one (init or restart)
        self.archive = ParetoArchive(n_in, n_out, c.max_len, self.device)
        self.es = ConstantES(c.es_centers, c.es_pairs, c.es_sigma, c.es_step, c.max_len, self.device) \
            if c.es_centers else None
        # operator per child (_operators): searchsorted of t / n plus a phase in the cumulative rates
        # (tail: copy)
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
            float(p.const_sigma), float(p.const_prob), *(float(c) for c in p.const_range),
            float(p.output_prob), p.grow_leaf_prob(n_in))

    def init(self, run: int = 0) -> Population:
        """A random initial population (``init_method`` over depths ``init_depth``); ``run`` > 0 draws
        another one (a fresh draw's, :meth:`restart`)."""
        lo, hi = self.params.const_range
        seed = mix_seed(self.seed, 0xA11CE) if run == 0 else mix_seed(self.seed, 0xA11CE, run)
        return Population.random(self.pop_size, self.n_in, self.n_out, max_len=self.max_len,
                                 functions=self.functions, method=self.init_method,
                                 min_depth=self.init_depth[0], max_depth=self.init_depth[1],
                                 const_prob=self.params.const_prob,
                                 const_range=(lo, hi), output_prob=self.params.output_prob,
                                 every_output=self.config.init_every_output,
                                 seed=seed, device=self.device)

    def restart(self, population: Population, fitness: torch.Tensor) -> Population:
        """In place of :meth:`step`: archives ``population`` and starts the search again from a fresh random
        population (counted as a generation; the archive and the caller's records span the draws)."""
        self.archive.update(population, S.loss_of(fitness, self.maximize))
        self.generation += 1
        self.fresh_at = self.generation
        return self.init(run=self.generation)

    def _operators(self, generation: int, copies: int) -> torch.Tensor:
        """The operator of each child: copy for the first ``copies`` children of every island (elites and
        migrants), then systematic sampling of ``rates`` over the island's n others (child t takes the
        operator whose cumulative-rate interval holds (t + phase) / n, phase uniform in [0, 1) per
        generation), so every operator makes floor or ceil of rate * n children, rate * n on average. Parents
        are drawn per child independently of t, so grouping the children by operator costs no randomness; it
        makes neighbouring warps of the vary kernel run the same operator's code (mixed operators diverge)."""
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

    def step(self, population: Population, fitness: torch.Tensor,
             errors: torch.Tensor | None = None) -> Population:
        """The next generation (``pop_size`` trees) from ``population`` and its ``fitness`` [P].

        ``errors`` [P, n_cases] are per-case errors for lexicase selection (lower is better)."""
        if not isinstance(population, Population):
            raise TypeError(f"population must be a gprl.Population, got {type(population).__name__}")
        if (population.n_in, population.n_out, population.max_len) != (self.n_in, self.n_out, self.max_len):
            raise ValueError("population must have this GP's n_in, n_out and max_len")
        if population.device != self.device:
            raise ValueError(f"population is on {population.device}, the GP on {self.device}; "
                             "move one of them")
        P = len(population)
        if P == 0:
            raise ValueError("population is empty; start from gp.init()")
        if not isinstance(fitness, torch.Tensor) or fitness.shape != (P,) or not fitness.is_floating_point() \
                or fitness.device != self.device:
            raise ValueError(f"fitness must be a floating tensor of shape [{P}] on {self.device}")
        if self.selection == "lexicase" and (not isinstance(errors, torch.Tensor) or errors.dim() != 2
                                             or errors.shape[0] != P):
            raise ValueError(f"lexicase selection needs errors [P={P}, n_cases] "
                             "in step(population, fitness, errors)")
        if self.elitism > P:
            raise ValueError(f"elitism={self.elitism} exceeds the population size {P}")
        if self.islands > 1 and P != self.pop_size:
            raise ValueError(f"with islands the population must have pop_size ({self.pop_size}) trees, "
                             f"got {P}")
        g = self.generation
        loss = raw = S.loss_of(fitness, self.maximize)
        # rows the strategy made last step (none in a fresh random population)
        pairs = self.es is not None and g != self.fresh_at and P == self.pop_size
        if pairs:  # they inform the strategy's step, not selection or elitism
            loss = self.es.hide_pairs(raw)
        sel_loss = S.with_parsimony(loss, population.lengths(), self.parsimony) if self.parsimony else loss
        I, e = self.islands, self.elitism
        m = self.migrants if g > 0 and g % self.migration_interval == 0 else 0
        S_in, S_out = P // I, self.pop_size // I  # trees per island, before and after
        n_kids = S_out - e - m
        # every island: its elites, the best `m` of the island before it (a ring), and children whose parent
        # and donor come from one selection call over the island
        # no extra ops on the plain path: its host time before the vary launch is the step's latency
        if I == 1:
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
            # best[-1]: the last island
            kept = torch.cat([best[i, :e], best[i - 1, :m]]) if m else best[i, :e]
            parents += [kept, picks[:n_kids]]
            donors += [kept, picks[n_kids:]]
        parent, donor = torch.cat(parents + donors).split(self.pop_size)
        zeros = self._zeros  # the exchange points (unused by these operators)
        tensors = ops.vary(*population.tensors(), *population.tensors(), parent, donor,
                           self._operators(g, e + m), zeros, zeros, *self._vary_args,
                           mix_seed(self.seed, g, 4))
        if self.es is not None:  # the last rows: the constants' evolution strategy (reads pairs from g = 1)
            tensors = self.es.apply(population, raw, loss, tensors, mix_seed(self.seed, g, 5),
                                    read_pairs=pairs)
        # archived after the vary launch is queued: the GPU runs it while the host queues the archive's ops
        self.archive.update(population, raw)
        self.generation += 1
        return Population(*tensors, n_in=self.n_in, n_out=self.n_out)
