"""Independent pure-Python references for the variation tests: tree rows as node lists, subtree splicing
and subtree sizes recomputed from the prefix structure (not from the kernels' size field)."""

import numpy as np

from gprl.core.functions import ARITY

FUNC = 3


def rows(pop):
    """Each tree as (nodes, sizes): nodes is a list of (kind, code, out, value) tuples."""
    k, c, o, v, s = (t.cpu().numpy() for t in pop.tensors())
    out = []
    for i in range(len(pop)):
        n = int(s[i, 0])
        out.append(([(int(k[i, j]), int(c[i, j]), int(o[i, j]), float(v[i, j])) for j in range(n)],
                    [int(x) for x in s[i, :n]]))
    return out


def sizes_of(nodes):
    """Subtree sizes from kinds and arities alone (reverse prefix walk)."""
    stack, sizes = [], [0] * len(nodes)
    for i in range(len(nodes) - 1, -1, -1):
        kind, code = nodes[i][0], nodes[i][1]
        ar = ARITY[code] if kind & 3 == FUNC else 0
        sizes[i] = 1 + sum(stack.pop() for _ in range(ar))
        stack.append(sizes[i])
    return sizes


def splice(a_nodes, a_sizes, k, b_nodes, b_sizes, j):
    """Tree a with its subtree at k replaced by subtree j of tree b."""
    return a_nodes[:k] + b_nodes[j:j + b_sizes[j]] + a_nodes[k + a_sizes[k]:]


def depth(sizes):
    ends, d = [], 0
    for i, s in enumerate(sizes):
        while ends and ends[-1] <= i:
            ends.pop()
        d = max(d, len(ends))
        ends.append(i + s)
    return d


def as_arrays(nodes, max_len):
    kind = np.zeros(max_len, np.uint8)
    code = np.zeros(max_len, np.int16)
    out = np.zeros(max_len, np.uint8)
    value = np.zeros(max_len, np.float32)
    size = np.zeros(max_len, np.int16)
    for i, (k, c, o, v) in enumerate(nodes):
        kind[i], code[i], out[i], value[i] = k, c, o, v
    size[:len(nodes)] = sizes_of(nodes)
    return kind, code, out, value, size
