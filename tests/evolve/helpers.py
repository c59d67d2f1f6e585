"""Shared by the variation tests on the CPU and the GPU: random populations and rounds of random operators
whose children are validated."""

import numpy as np
import torch

from gprl import OPS, Population, VariationParams, vary
from gprl.core.functions import BY_NAME

ALL = list(BY_NAME)
RANDOM_OPS = [code for name, code in OPS.items() if name != "exchange"]


def population(P, n_in=3, n_out=1, max_len=48, seed=0, functions=ALL, max_depth=6, device="cpu"):
    return Population.random(P, n_in, n_out, max_len=max_len, functions=functions, max_depth=max_depth,
                             const_range=(-2, 2), output_prob=0.4, seed=seed, device=device)


def random_rounds(pop, rounds, seed, device="cpu", max_depth=10):
    """`rounds` generations of a random operator per tree (every operator, exchange at random points)."""
    rng = np.random.default_rng(seed)
    P = len(pop)
    params = VariationParams(functions=ALL, max_depth=max_depth, subtree_depth=5, multi_prob=0.3,
                             const_sigma=5.0)
    for r in range(rounds):
        op = torch.from_numpy(rng.choice(RANDOM_OPS + [OPS["exchange"]], size=P).astype(np.int32))
        parent = torch.from_numpy(rng.integers(0, P, P))
        node = torch.from_numpy(rng.integers(0, pop.max_len, P).astype(np.int32))  # may lie outside a tree
        dnode = torch.from_numpy(rng.integers(0, pop.max_len, P).astype(np.int32))
        new = vary(pop, op.to(device), parent=parent.to(device), node=node.to(device),
                   donor_node=dnode.to(device), params=params, seed=int(rng.integers(1 << 40)))
        errors = new.validate()
        assert int((errors != 0).sum()) == 0, f"round {r}: {int((errors != 0).sum())} invalid trees"
        # a child is deeper than the limit only if it is an unchanged parent
        too_deep = new.depths() > max_depth
        if bool(too_deep.any()):
            same = torch.stack([(a == b[parent.to(device)]).all(1)
                                for a, b in zip(new.tensors(), pop.tensors())])
            assert bool(same.all(0)[too_deep].all())
        pop = new
    return pop
