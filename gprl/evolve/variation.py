"""Tree variation operators on the device: subtree exchange, crossover and mutations.

Every operator is one launch of the ``gprl::vary`` op over the whole population (``kernels/variation.h``):
child ``t`` is parent ``parent[t]`` varied by operator ``op[t]``, so a generation can mix operators per
child in a single launch (``gprl.GeneticProgramming`` does). A child that would be longer than ``max_len``
or deeper than ``max_depth`` is an unchanged copy of its parent. The same seed gives the same children on
the CPU and on CUDA.

Operators (``OPS``):

==================  ========================================================================================
copy                the parent unchanged (reproduction, elitism)
exchange            subtree ``node[t]`` of the parent replaced by subtree ``donor_node[t]`` of a donor
crossover           subtree crossover: a random subtree of the parent replaced by a random donor subtree;
                    points are uniform over nodes, or leaf-biased (a leaf with probability
                    ``crossover_leaf_prob``, else a function node; Koza's 90/10 rule is 0.1)
subtree             a random subtree replaced by a new random (grow) subtree of depth <= ``subtree_depth``
hoist               a function node's subtree replaced by one of its proper subtrees (never grows)
point               one node changed in place: function -> allowed function of the same arity,
                    variable -> other variable, constant -> new uniform constant (shape kept)
multipoint          every node point-changed with probability ``multi_prob``
insert              a new allowed function node above a random subtree, its other children new leaves
delete              a function node replaced by one of its children (never grows)
constant            one constant += N(0, ``const_sigma``^2) (structure kept)
multiconstant       every constant perturbed with probability ``multi_prob``
output              Modi toggle (n_out > 1): a Modi node is cleared or redirected to another output, a plain
                    function node becomes a Modi node of a random output
==================  ========================================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gprl.backend.ops import ops
from gprl.core import functions as F
from gprl.core.encoding import MAX_DEPTH_LIMIT
from gprl.core.population import Population
from gprl.core.seeds import seed_from

OPS: dict[str, int] = {
    "copy": 0, "exchange": 1, "crossover": 2, "subtree": 3, "hoist": 4, "point": 5, "multipoint": 6,
    "insert": 7, "delete": 8, "constant": 9, "multiconstant": 10, "output": 11,
}


@dataclass(frozen=True)
class VariationParams:
    """Parameters shared by every operator; see the module docstring for their use."""

    functions: Sequence[str] | dict[str, float] | None = None  # allowed functions (and weights) of new nodes
    max_depth: int = 0  # 0: no depth limit; else children deeper than this stay copies of their parent
    subtree_depth: int = 4
    crossover_leaf_prob: float | None = 0.1  # None: crossover points uniform over all nodes
    multi_prob: float = 0.1
    const_sigma: float = 0.1
    const_prob: float = 0.2
    const_range: tuple[float, float] = (-1.0, 1.0)
    output_prob: float = 0.3
    leaf_prob: float | None = None  # grow's leaf probability; None: Koza's share of terminals

    def __post_init__(self):
        F.function_weights(self.functions)  # raises on unknown names or bad weights
        for name, v, hi in (("max_depth", self.max_depth, MAX_DEPTH_LIMIT),
                            ("subtree_depth", self.subtree_depth, MAX_DEPTH_LIMIT)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= v <= hi:
                raise ValueError(f"{name} must be an integer in 0..{hi}, got {v!r}")
        probs = [("multi_prob", self.multi_prob), ("const_prob", self.const_prob),
                 ("output_prob", self.output_prob)]
        for name, v in probs + [("crossover_leaf_prob", self.crossover_leaf_prob),
                                ("leaf_prob", self.leaf_prob)]:
            if v is not None and not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {v!r}")
        if not (np.isfinite(self.const_sigma) and self.const_sigma >= 0):
            raise ValueError(f"const_sigma must be a finite number >= 0, got {self.const_sigma!r}")
        lo, hi = (float(c) for c in self.const_range)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            raise ValueError("const_range must be finite (low, high) with low <= high, "
                             f"got {self.const_range}")

    def weights(self) -> list[float]:
        return F.function_weights(self.functions)

    def grow_leaf_prob(self, n_in: int) -> float:
        if self.leaf_prob is not None:
            return float(self.leaf_prob)
        return F.default_leaf_prob(n_in, self.const_prob, self.weights())


_weight_cache: dict[tuple, torch.Tensor] = {}


def weights_tensor(params: VariationParams, device: torch.device) -> torch.Tensor:
    """The function weights on the device, cached so a generation does not re-upload them."""
    key = (tuple(params.weights()), str(device))
    if key not in _weight_cache:
        _weight_cache[key] = torch.tensor(key[0], dtype=torch.float32, device=device)
    return _weight_cache[key]


def _index(x, n: int, name: str, device, dtype, bound: int | None, check: bool) -> torch.Tensor:
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return torch.full((n,), int(x), dtype=dtype, device=device)
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    if x.dtype.is_floating_point or x.dtype == torch.bool or x.dim() != 1 or x.shape[0] != n:
        raise ValueError(f"{name} must be an integer tensor of shape [{n}], got {x.dtype} {tuple(x.shape)}")
    x = x.to(device=device, dtype=dtype)
    if check and bound is not None and n and bool(((x < 0) | (x >= bound)).any()):  # one host sync
        raise ValueError(f"{name} holds indices outside 0..{bound - 1}")
    return x


def vary(population: Population, op: str | int | torch.Tensor, *, parent=None,
         donors: Population | None = None, donor=None, node=None, donor_node=None,
         params: VariationParams | None = None,
         seed: int | torch.Generator | None = None, check: bool = True) -> Population:
    """Children ``[N]``: child t is ``population[parent[t]]`` varied by ``op[t]`` (an ``OPS`` name or code).

    ``parent`` defaults to every tree once. Exchange and crossover take subtrees of ``donors`` (default: the
    population itself) at rows ``donor`` (default: a random row per child). ``node``/``donor_node`` are the
    exchange points of ``exchange``. ``check=False`` skips the index range checks (their host sync).
    """
    if not isinstance(population, Population):
        raise TypeError(f"population must be a gprl.Population, got {type(population).__name__}")
    params = VariationParams() if params is None else params
    if not isinstance(params, VariationParams):
        raise TypeError(f"params must be a gprl.VariationParams, got {type(params).__name__}")
    dev, P = population.device, len(population)
    if parent is None:
        parent = torch.arange(P, device=dev)
    n = parent.shape[0] if hasattr(parent, "shape") else len(parent)
    if n and P == 0:
        raise ValueError("population is empty: children need parents")
    parent = _index(parent, n, "parent", dev, torch.int64, P, check)
    if isinstance(op, str):
        if op not in OPS:
            raise ValueError(f"op must be one of {list(OPS)}, got {op!r}")
        op = OPS[op]
    op = _index(op, n, "op", dev, torch.int32, len(OPS), check)
    donors = population if donors is None else donors
    if not isinstance(donors, Population):
        raise TypeError(f"donors must be a gprl.Population, got {type(donors).__name__}")
    if donors.device != dev or donors.n_in > population.n_in or donors.n_out > population.n_out:
        raise ValueError("donors must be on the population's device, with n_in/n_out <= the population's")
    s = seed_from(seed)
    if donor is None:
        u = ops.uniform(population.kind, n, s ^ 0x5DEECE66D)
        donor = (u * len(donors)).long().clamp_(max=max(len(donors) - 1, 0))
    donor = _index(donor, n, "donor", dev, torch.int64, len(donors), check)
    node = _index(0 if node is None else node, n, "node", dev, torch.int32, None, check)
    donor_node = _index(0 if donor_node is None else donor_node, n, "donor_node", dev, torch.int32, None,
                        check)
    lo, hi = (float(c) for c in params.const_range)
    xo = -1.0 if params.crossover_leaf_prob is None else float(params.crossover_leaf_prob)
    tensors = ops.vary(
        *population.tensors(), *donors.tensors(), parent, donor, op, node, donor_node,
        weights_tensor(params, dev), population.n_in, population.n_out, int(params.max_depth),
        int(params.subtree_depth), xo, float(params.multi_prob), float(params.const_sigma),
        float(params.const_prob), lo, hi, float(params.output_prob), params.grow_leaf_prob(population.n_in),
        s)
    return Population(*tensors, n_in=population.n_in, n_out=population.n_out)


def subtree_exchange(population: Population, node, donors: Population, donor, donor_node, *,
                     max_depth: int = 0) -> Population:
    """Every tree t with its subtree at ``node[t]`` replaced by subtree ``donor_node[t]`` of
    ``donors[donor[t]]``; ancestor sizes are fixed. A result longer than max_len or deeper than
    ``max_depth`` (0: no limit), or a node index outside its tree, leaves the tree unchanged."""
    return vary(population, "exchange", donors=donors, donor=donor, node=node, donor_node=donor_node,
                params=VariationParams(max_depth=max_depth), seed=0)


def crossover(population: Population, donors: Population | None = None, donor=None, *,
              leaf_prob: float | None = 0.1, params: VariationParams | None = None, seed=None) -> Population:
    """Subtree crossover, one child per tree: the tree with a random subtree replaced by a random subtree of
    its donor. ``leaf_prob`` picks leaves with that probability (Koza 90/10: 0.1); None is uniform."""
    params = _with(params, crossover_leaf_prob=leaf_prob)
    return vary(population, "crossover", donors=donors, donor=donor, params=params, seed=seed)


def _with(params: VariationParams | None, **changes) -> VariationParams:
    from dataclasses import replace

    return replace(params or VariationParams(), **changes)


def _mutation(op: str, doc: str):
    def mutate(population: Population, *, params: VariationParams | None = None, seed=None) -> Population:
        return vary(population, op, params=params, seed=seed)

    mutate.__name__ = f"{op}_mutation"
    mutate.__doc__ = doc
    return mutate


subtree_mutation = _mutation("subtree", "A random subtree of every tree replaced by a new grown subtree.")
hoist_mutation = _mutation("hoist", "A function node's subtree replaced by one of its own subtrees.")
point_mutation = _mutation("point", "One node per tree changed to another of the same kind and arity.")
multi_point_mutation = _mutation("multipoint", "Every node point-changed with probability params.multi_prob.")
insert_mutation = _mutation("insert", "A new function node inserted above a random subtree.")
delete_mutation = _mutation("delete", "A function node replaced by one of its children.")
constant_mutation = _mutation("constant", "One constant per tree perturbed by N(0, const_sigma^2).")
multi_constant_mutation = _mutation("multiconstant", "Each constant perturbed with probability multi_prob.")
output_mutation = _mutation("output", "A Modi flag toggled or its output index redrawn (n_out > 1).")
