"""Simplification by evaluation: a tree's subtrees replaced where the outputs that matter barely change.

Evolved trees carry pieces that hardly act on the inputs they meet: a comparison that always comes out the
same way, a ``min`` one branch of which always wins, a term whose weight is tiny against the others.
Algebra (sympy) cannot see this; the inputs can. Given rows ``X`` the tree actually meets (for a policy: the
observations of its own episodes), :func:`simplify` repeatedly replaces

* a subtree by the mean of its value over ``X`` (one constant), or
* a function node by one of its children's subtrees (a hoist),

whichever shortens the tree most while ``compare(outputs)`` stays within ``tolerance`` of the original tree's
(the root mean square over the rows, per compared column, the largest column deciding). Every candidate
replacement of a round is built by one ``exchange`` launch and evaluated by one forward call; disjoint
replacements that fit together are taken in the same round. The result computes what the original does up to
``tolerance`` on ``X`` only: a policy's simplified trees are validated on fresh episodes before one is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from gprl.core.encoding import CONST, FUNC, KIND_MASK, MAX_LEN_LIMIT, OUTPUT_FLAG
from gprl.core.functions import BOUND
from gprl.core.population import Population
from gprl.evolve.variation import vary


def _nodes(kind: list[int], out: list[int], size: list[int], values: torch.Tensor, n_in: int, n_out: int,
           max_len: int) -> Population:
    """``len(values)`` copies of one short tree (``kind``, ``out``, ``size`` per node; functions are ``add``,
    id 0), copy ``k`` with ``values[k]`` at its first node's value; padded to ``max_len``."""
    K, n, dev = len(values), len(kind), values.device

    def field(v, dtype):
        return torch.nn.functional.pad(torch.tensor(v, dtype=dtype, device=dev).expand(K, n),
                                       (0, max_len - n))

    value = torch.nn.functional.pad(values.float()[:, None], (0, max_len - 1))
    return Population(field(kind, torch.uint8), field([0] * n, torch.int16), field(out, torch.uint8), value,
                      field(size, torch.int16), n_in=n_in, n_out=n_out)


def _exchange(tree: Population, node: torch.Tensor, donors: Population, donor: torch.Tensor,
              donor_node: torch.Tensor) -> Population:
    """``len(node)`` copies of one ``tree``, copy ``k`` with its subtree at ``node[k]`` replaced by subtree
    ``donor_node[k]`` of ``donors[donor[k]]``."""
    parent = torch.zeros(len(node), dtype=torch.long, device=tree.device)
    return vary(tree, "exchange", parent=parent, donors=donors, donor=donor, node=node, donor_node=donor_node)


def node_values(tree: Population, X: torch.Tensor) -> torch.Tensor:
    """The value every node of one tree passes up to its parent, on rows ``X`` ``[D, n_in]``: ``[L, D]``
    for its ``L`` nodes. Node ``i``'s subtree is grafted under a Modi ``add(·, 0)`` writing to an extra
    output, so Modi nodes inside it write elsewhere and its value comes out alone."""
    L, n_out, dev = int(tree.size[0, 0]), tree.n_out, tree.device
    probe = _nodes([FUNC | OUTPUT_FLAG, CONST, CONST], [n_out, 0, 0], [3, 1, 1], torch.zeros(1, device=dev),
                   tree.n_in, n_out + 1, tree.max_len + 2)
    nodes = torch.arange(L, device=dev)
    probes = _exchange(probe, torch.ones_like(nodes), tree, torch.zeros_like(nodes), nodes)
    return probes.forward(X, check_finite=False)[:, :, n_out]


def _candidates(tree: Population, values: torch.Tensor) -> tuple[Population, torch.Tensor, torch.Tensor]:
    """Every one-step simplification of one tree: each function node replaced by its mean value, then by
    each child's subtree. Returns the candidates, the node each replaces ``[K]`` and the nodes each saves."""
    L, dev = int(tree.size[0, 0]), tree.device
    size, arity = tree.size[0, :L].long(), tree.arities()[0, :L].long()
    fn = torch.nonzero((tree.kind[0, :L] & KIND_MASK) == FUNC).flatten()
    hoisted, children = [], []  # a node's children: the next node, then each after its sibling's subtree
    for i in fn.tolist():
        c = i + 1
        for _ in range(int(arity[i])):
            hoisted.append(i)
            children.append(c)
            c += int(size[c])
    hoisted = torch.tensor(hoisted, dtype=torch.long, device=dev)
    children = torch.tensor(children, dtype=torch.long, device=dev)
    # donors: the tree itself (row 0), then a constant per function node: its mean value
    F = len(fn)
    mean = values[fn].double().mean(1).clamp(-BOUND, BOUND)  # saturated values stay finite constants
    consts = _nodes([CONST], [0], [1], mean, tree.n_in, tree.n_out, tree.max_len)
    node = torch.cat([fn, hoisted])
    cands = _exchange(tree, node, Population.cat([tree, consts]),
                      torch.cat([torch.arange(1, F + 1, device=dev), torch.zeros_like(hoisted)]),
                      torch.cat([torch.zeros_like(fn), children]))
    saved = size[node] - torch.cat([torch.ones_like(fn), size[children]])
    return cands, node, saved


def _deviation(outputs: torch.Tensor, reference: torch.Tensor, compare: Callable) -> torch.Tensor:
    """``[K]``: per candidate, the largest column's root mean square of ``compare(outputs) - reference``."""
    return (compare(outputs) - reference).square().mean(1).sqrt().amax(-1)


def simplify(tree: Population, X: torch.Tensor, tolerance: float,
             compare: Callable[[torch.Tensor], torch.Tensor] = lambda y: y,
             reference: torch.Tensor | None = None, seconds: float | None = None) -> Population:
    """The shortest tree :mod:`this module <gprl.evolve.simplify>`'s greedy rounds reach from one ``tree``
    whose ``compare``-d outputs on ``X`` ``[D, n_in]`` stay within ``tolerance`` (root mean square per column)
    of ``reference`` (default: the tree's own; pass the original's to go on from an earlier result).
    ``compare`` maps outputs ``[K, D, n_out]`` to the compared columns ``[K, D, C]``. ``seconds`` bounds the
    time: the tree reached by then is returned."""
    if len(tree) != 1:
        raise ValueError(f"simplify takes one tree, got a population of {len(tree)}")
    if not (tolerance >= 0):
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    X = torch.as_tensor(X, dtype=torch.float32, device=tree.device)
    if reference is None:
        reference = compare(tree.forward(X, check_finite=False))[0]
    begin = time.perf_counter()
    for _ in range(MAX_LEN_LIMIT):  # each round shortens the tree
        if seconds is not None and time.perf_counter() - begin > seconds:
            break
        cands, node, saved = _candidates(tree, node_values(tree, X))
        if not len(node):
            break
        dev = _deviation(cands.forward(X, check_finite=False), reference, compare)
        fits = torch.nonzero((dev <= tolerance) & (saved > 0)).flatten()
        if not len(fits):
            break
        # most nodes saved first (the smaller deviation among equals), then every disjoint one after it
        order = sorted(fits.tolist(), key=lambda k: (-int(saved[k]), float(dev[k])))
        at, size = node.tolist(), tree.size[0].tolist()
        taken: list[int] = []
        for k in order:
            i = at[k]
            if all(i + size[i] <= at[j] or at[j] + size[at[j]] <= i for j in taken):
                taken.append(k)
        step = _apply(tree, cands, node, taken)
        if len(taken) > 1 and float(_deviation(step.forward(X, check_finite=False), reference, compare)[0]) \
                > tolerance:
            step = cands[taken[0]]  # together they drift too far: the largest alone
        tree = step
    return tree


def _apply(tree: Population, cands: Population, node: torch.Tensor, taken: list[int]) -> Population:
    """``tree`` with the disjoint replacements of candidates ``taken`` all made: from the last node to the
    first, so that each one's node index still holds when it is made (candidate ``k`` holds its replacement
    at its own node)."""
    if len(taken) == 1:
        return cands[taken[0]]
    for k in sorted(taken, key=lambda k: -int(node[k])):
        at = node[k:k + 1]
        tree = _exchange(tree, at, cands, torch.tensor([k], device=tree.device), at)
    return tree
