"""Shared by the op tests on the CPU and the GPU: torch.library.opcheck over every registered gprl op."""

import torch

from gprl import Population
from gprl.core.functions import BY_NAME


def opcheck_all(device):
    pop = Population.random(20, 3, 2, max_len=32, functions=list(BY_NAME), seed=0, device=device)
    pop1 = Population.random(20, 3, max_len=32, functions=list(BY_NAME), seed=1, device=device)
    Xt = torch.randn(3, 50, device=device)  # the ops take column-major data
    yt = torch.randn(2, 50, device=device)
    w = torch.rand(50, device=device)
    weights = torch.ones(len(BY_NAME), device=device)
    ops = torch.ops.gprl
    cases = [
        (ops.generate, (weights, 10, 32, 3, 2, 2, 1, 4, 0.3, 0.2, -1.0, 1.0, 0.3, 123)),
        (ops.node_depth, (pop.size,)),
        (ops.validate, (*pop.tensors(), 3, 2)),
        (ops.forward, (*pop.tensors(), Xt, 2, pop.max_stack())),
        (ops.forward_batched, (*pop.tensors(), torch.randn(20, 4, 3, device=device), 2, pop.max_stack())),
        (ops.fitness, (*pop.tensors(), Xt, yt, None, 0, pop.max_stack())),
        (ops.fitness, (*pop.tensors(), Xt, yt, w, 2, pop.max_stack())),
        # an explicit evaluation strategy (gprl.strategy ids): hybrid_r4, hybrid_r1, warp (single output)
        (ops.fitness, (*pop.tensors(), Xt, yt, w, 1, pop.max_stack(), 4)),
        (ops.forward, (*pop.tensors(), Xt, 2, pop.max_stack(), 2)),
        (ops.fitness, (*pop1.tensors(), Xt, yt[:1], None, 0, pop1.max_stack(), 1)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)
