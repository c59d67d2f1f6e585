"""The tree encoding: five ``[P, max_len]`` tensors per population (the one place it is documented;
``kernels/nodes.h`` implements it).

* Trees are in **prefix order**, left-aligned and padded to ``max_len``. Node ``i`` of a tree roots the
  subtree ``[i, i + size[i])``; the tree's length is ``size[:, 0]``.
* ``kind``  uint8:  0 PAD, 1 VAR, 2 CONST, 3 FUNC; bit 4 (``OUTPUT_FLAG``) marks a FUNC node as a Modi
  output node.
* ``code``  int16:  the variable index of a VAR node, the function id (``gprl.functions``) of a FUNC node,
  0 otherwise.
* ``out``   uint8:  the output index of a Modi node, 0 otherwise (so ``n_out <= 256``).
* ``value`` float32: the constant of a CONST node, 0 otherwise.
* ``size``  int16:  the subtree size of every node, 0 for padding.

Padding nodes are all zeros, and fields a node does not use are 0, so equal trees are equal tensors.
10 bytes per node: 10^6 trees of 512 nodes take 5.1 GB.

**Outputs (Modi semantics).** A tree computes ``n_out`` outputs, all starting at 0. A Modi node computes
its function, adds that value to its output, and passes the value of its last (rightmost) child up to its
parent. The root, unless it is itself a Modi node, adds its value to output 0; so a tree without Modi
nodes is an ordinary single-output expression.
"""

from __future__ import annotations

import torch

from gprl.core import functions as F

PAD, VAR, CONST, FUNC = 0, 1, 2, 3
KIND_MASK, OUTPUT_FLAG = 0x03, 0x04
MAX_LEN_LIMIT = 4096  # int16 sizes and shared-memory staging of a tree in the CUDA kernels
MAX_OUTPUTS = 256
MAX_DEPTH_LIMIT = 64  # the generator's depth bound (kernels/trees.h)
METRICS = {"mse": 0, "mae": 1, "rmse": 2}
SCALED_METRICS = {"mse": 3, "rmse": 4}  # after each output's least-squares linear scaling (kernels/ops.h)
METHODS = {"grow": 0, "full": 1, "ramped": 2}
TREE_ERRORS = {
    1: "length (size[0]) is outside 1..max_len",
    2: "a node kind is not PAD/VAR/CONST/FUNC, or a non-function node carries the output flag",
    3: "prefix structure is broken (padding inside the tree, a function lacking children, or extra nodes)",
    4: "a subtree size does not match the structure",
    5: "a function id is unknown",
    6: "a variable index is >= n_in",
    7: "a Modi output index is >= n_out",
    8: "a constant is not finite",
    9: "padding after the tree is not all zeros",
    10: "a field the node does not use is not 0",
}


def arities(kind: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
    """Number of children of every node, int32 (0 for leaves and padding)."""
    is_fn = (kind & KIND_MASK) == FUNC
    idx = code.long().clamp(0, F.NUM_FUNCTIONS - 1)
    return torch.where(is_fn, torch.tensor(F.ARITY, dtype=torch.int32, device=kind.device)[idx], 0)


def stack_depth(kind: torch.Tensor, code: torch.Tensor) -> int:
    """Evaluation stack depth that trees ``[P, max_len]`` need (one host sync)."""
    if kind.shape[0] == 0:
        return 1
    step = torch.where((kind & KIND_MASK) != PAD, 1 - arities(kind, code), 0)
    height = step.flip(1).cumsum(1)  # stack height after evaluating each node, last to first
    return max(1, int(height.max()))
